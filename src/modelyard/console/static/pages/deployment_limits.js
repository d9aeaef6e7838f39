// A deployment's limits for every key together (requests and tokens per minute, requests at once):
// shown, and set from the form (PATCH ... {"limits": {...}}: the set replaces the old one whole).
import { api, errorBox, okBox, replace } from "../console.js";

const FIELDS = [
  ["limit-rpm", "requests_per_minute"],
  ["limit-tpm", "tokens_per_minute"],
  ["limit-concurrent", "max_concurrent_requests"],
];

export class DeploymentLimits {
  constructor(path, onChanged) {
    this.path = path;
    this.touched = false;
    this.result = document.getElementById("limits-result");
    const form = document.getElementById("limits-form");
    form.addEventListener("input", () => { this.touched = true; });
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.save(onChanged);
    });
  }

  show(deployment) {
    const limits = deployment.limits || {};
    const set = FIELDS.filter(([, field]) => limits[field] != null);
    document.getElementById("limits-now").textContent = set.length
      ? `In force: ${set.map(([id, field]) => `${Number(limits[field]).toLocaleString("en-US")} ${document.querySelector(`label[for=${id}]`).textContent.toLowerCase()}`).join(" · ")}`
      : "No limits: every key's own limits apply alone.";
    if (this.touched) return;
    for (const [id, field] of FIELDS) document.getElementById(id).value = limits[field] ?? "";
  }

  async save(onChanged) {
    const limits = {};
    for (const [id, field] of FIELDS) {
      const text = document.getElementById(id).value.trim();
      if (text !== "") limits[field] = Number(text);
    }
    try {
      await api(this.path, { method: "PATCH", json: { limits } });
      this.touched = false;
      replace(this.result, okBox("Limits saved."));
      await onChanged();
    } catch (error) {
      replace(this.result, errorBox(error));
    }
  }
}

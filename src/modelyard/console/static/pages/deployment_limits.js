// A deployment's limits for every key together (requests and tokens per minute, requests at once):
// shown, and set from the form (PATCH ... {"limits": {...}}: the set replaces the old one whole).
// A role that may not change the deployment (a member) has no form: the limits are only shown.
import { api, errorBox, okBox, replace } from "../console.js";

const FIELDS = [
  ["limit-rpm", "requests_per_minute", "requests per minute"],
  ["limit-tpm", "tokens_per_minute", "tokens per minute"],
  ["limit-concurrent", "max_concurrent_requests", "requests at once"],
];

export class DeploymentLimits {
  constructor(path, onChanged) {
    this.path = path;
    this.touched = false;
    this.result = document.getElementById("limits-result");
    this.form = document.getElementById("limits-form");
    const form = this.form;
    form?.addEventListener("input", () => { this.touched = true; });
    form?.addEventListener("submit", (event) => {
      event.preventDefault();
      this.save(onChanged);
    });
  }

  show(deployment) {
    const limits = deployment.limits || {};
    const set = FIELDS.filter(([, field]) => limits[field] != null);
    document.getElementById("limits-now").textContent = set.length
      ? `In force: ${set.map(([, field, label]) => `${Number(limits[field]).toLocaleString("en-US")} ${label}`).join(" · ")}`
      : "No limits: every key's own limits apply alone.";
    if (this.touched || !this.form) return;
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

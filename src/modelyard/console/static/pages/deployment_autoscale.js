// A deployment's autoscale: the settings in force and what the rule last said (GET .../autoscale),
// set from the form (PATCH ... {"autoscale": {...}}: the whole settings, the ones the form does not
// show kept as they were), turned off (PATCH ... {"autoscale": null}). The server checks every
// value; its error is shown beside the field it names (details.field), nothing is stored.
// Only on the page of a role that may change deployments (the template leaves the form out).
import { ApiError, api, errorBox, okBox, replace } from "../console.js";

// Form input -> the settings field it sets (numbers; empty: the server's default, or required).
const NUMBERS = [
  ["autoscale-min", "min"],
  ["autoscale-max", "max"],
  ["autoscale-stabilisation", "stabilisation_s"],
  ["autoscale-cooldown", "cooldown_s"],
  ["autoscale-idle", "idle_s"],
];
const INPUTS = [...NUMBERS.map(([id]) => id), "autoscale-metric", "autoscale-value", "autoscale-schedule"];
const SCHEDULE_KEYS = ["cron", "duration", "min", "timezone", "name"];

/** The input an error of the server is about, from the field it names (autoscale.target.metric). */
function inputFor(error) {
  const field = error instanceof ApiError ? error.details?.field ?? "" : "";
  if (field.startsWith("autoscale.schedule")) return "autoscale-schedule";
  if (field === "autoscale.target.metric") return "autoscale-metric";
  if (field.startsWith("autoscale.target")) return "autoscale-value";
  for (const [id, name] of NUMBERS) if (field === `autoscale.${name}`) return id;
  // A check across fields (min above max, a schedule's min above max): the one to change first.
  if (field === "autoscale" && /schedule\[\d+\]/.test(error.message)) return "autoscale-schedule";
  if (field === "autoscale" && /\bmin \(\d+\) is more than max/.test(error.message)) return "autoscale-min";
  return null;
}

class ScheduleError extends Error {}

/** One window a line: "cron=0 8 * * 1-5; duration=10h; min=2; timezone=Europe/Paris". */
function parseSchedule(text) {
  return text.split("\n").map((line) => line.trim()).filter(Boolean).map((line, index) => {
    const entry = {};
    for (const part of line.split(";").map((piece) => piece.trim()).filter(Boolean)) {
      const at = part.indexOf("=");
      const key = at > 0 ? part.slice(0, at).trim() : "";
      if (!SCHEDULE_KEYS.includes(key)) {
        throw new ScheduleError(`line ${index + 1}: '${part}' is not one of ${SCHEDULE_KEYS.map((k) => `${k}=…`).join(", ")}`);
      }
      const value = part.slice(at + 1).trim();
      entry[key] = key === "min" && /^\d+$/.test(value) ? Number(value) : value;
    }
    return entry;
  });
}

function scheduleText(schedule) {
  return (schedule ?? []).map((entry) => SCHEDULE_KEYS
    .filter((key) => entry[key] !== null && entry[key] !== undefined && !(key === "timezone" && entry[key] === "UTC"))
    .map((key) => `${key}=${entry[key]}`).join("; ")).join("\n");
}

function summary(autoscale) {
  if (!autoscale) return "Off: replicas are set by hand (Controls above).";
  const target = autoscale.target;
  const parts = [`Autoscaled between ${autoscale.min} and ${autoscale.max} replicas on ${target.metric} (target ${target.value})`];
  if (autoscale.min === 0) parts.push(`scaled to zero after ${autoscale.idle_s} s without a request`);
  if (autoscale.schedule?.length) parts.push(`${autoscale.schedule.length} schedule window(s)`);
  return `${parts.join("; ")}.`;
}

export class DeploymentAutoscale {
  constructor(path, onChanged) {
    this.path = path;
    this.onChanged = onChanged;
    this.touched = false;
    this.current = null;
    this.result = document.getElementById("autoscale-result");
    const form = document.getElementById("autoscale-form");
    form.addEventListener("input", () => { this.touched = true; });
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.save();
    });
    document.getElementById("autoscale-off").addEventListener("click", () => this.turnOff());
  }

  async show() {
    const view = await api(`${this.path}/autoscale?limit=1`);
    this.current = view.autoscale;
    document.getElementById("autoscale-now").textContent = summary(view.autoscale);
    document.getElementById("autoscale-rule").textContent = view.autoscale && view.last ? `The rule says: ${view.last.reason}` : "";
    document.getElementById("autoscale-off").disabled = !view.autoscale;
    if (this.touched) return;
    const autoscale = view.autoscale ?? {};
    for (const [id, name] of NUMBERS) document.getElementById(id).value = autoscale[name] ?? "";
    document.getElementById("autoscale-metric").value = autoscale.target?.metric ?? "waiting_per_replica";
    document.getElementById("autoscale-value").value = autoscale.target?.value ?? "";
    document.getElementById("autoscale-schedule").value = scheduleText(autoscale.schedule);
  }

  clearErrors() {
    replace(this.result);
    for (const id of INPUTS) {
      const line = document.getElementById(`${id}-error`);
      line.hidden = true;
      line.textContent = "";
      document.getElementById(id).removeAttribute("aria-invalid");
    }
  }

  showError(id, message) {
    const line = document.getElementById(`${id}-error`);
    line.textContent = message;
    line.hidden = false;
    const input = document.getElementById(id);
    input.setAttribute("aria-invalid", "true");
    input.focus();
  }

  settings() {
    // The settings the form does not show (scale-down window, hold bounds) are kept as they are.
    const settings = { ...(this.current ?? {}) };
    if (settings.scale_down_stabilisation_s === null) delete settings.scale_down_stabilisation_s;
    for (const [id, name] of NUMBERS) {
      const text = document.getElementById(id).value.trim();
      if (text === "") delete settings[name];
      else settings[name] = Number(text);
    }
    const value = document.getElementById("autoscale-value").value.trim();
    settings.target = { metric: document.getElementById("autoscale-metric").value };
    if (value !== "") settings.target.value = Number(value);
    settings.schedule = parseSchedule(document.getElementById("autoscale-schedule").value);
    return settings;
  }

  async save() {
    this.clearErrors();
    let settings;
    try {
      settings = this.settings();
    } catch (error) {
      if (!(error instanceof ScheduleError)) throw error;
      this.showError("autoscale-schedule", error.message);
      return;
    }
    try {
      await api(this.path, { method: "PATCH", json: { autoscale: settings } });
    } catch (error) {
      const id = inputFor(error);
      if (id) this.showError(id, error.hint ? `${error.message}. Fix: ${error.hint}` : error.message);
      else replace(this.result, errorBox(error));
      return;
    }
    this.touched = false;
    replace(this.result, okBox("Autoscale saved."));
    await this.onChanged();
  }

  async turnOff() {
    this.clearErrors();
    try {
      await api(this.path, { method: "PATCH", json: { autoscale: null } });
    } catch (error) {
      replace(this.result, errorBox(error));
      return;
    }
    this.touched = false;
    replace(this.result, okBox("Autoscale off: the replicas stay where they are, set by hand from now on."));
    await this.onChanged();
  }
}

// The audit log: who did what to which object, and when, newest first (GET /api/v1/audit).
import { api, errorBox, formatTime, h, replace, table } from "../console.js";

const form = document.getElementById("audit-form");

function details(event) {
  const entries = Object.entries(event.details ?? {});
  if (!entries.length) return "";
  return entries.map(([name, value]) => `${name}: ${typeof value === "string" ? value : JSON.stringify(value)}`).join("; ");
}

async function refresh() {
  const query = new URLSearchParams();
  for (const [name, id] of [["actor", "actor"], ["object_type", "object-type"], ["object_name", "object-name"]]) {
    const value = document.getElementById(id).value.trim();
    if (value) query.set(name, value);
  }
  for (const name of ["since", "until"]) {
    const value = document.getElementById(name).value;
    if (value) query.set(name, new Date(value).toISOString());
  }
  try {
    const answer = await api(`/audit?${query}`);
    replace(document.getElementById("events"), table(
      [
        ["when", (event) => formatTime(event.at)],
        ["who", (event) => event.actor],
        ["did", (event) => event.action],
        ["what", (event) => event.object_type],
        ["name", (event) => event.object_name],
        ["project", (event) => event.project ?? ""],
        ["details", (event) => h("span", { class: "muted" }, details(event))],
      ],
      answer.events,
      { empty: "Nothing recorded for this choice.", caption: `${answer.events.length} events` },
    ));
  } catch (error) {
    replace(document.getElementById("events"), errorBox(error));
  }
}

form.addEventListener("submit", (event) => {
  event.preventDefault();
  refresh();
});
refresh();

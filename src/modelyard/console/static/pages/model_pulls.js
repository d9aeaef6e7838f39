// Model pulls on the model files page: the pull form (POST /api/v1/models/pull, or its dry run:
// the plan, nothing stored) and the tasks (GET /api/v1/tasks) with their progress, file by file,
// polled while one runs; cancel and resume.
import { ApiError, api, badge, controlButton, errorBox, formatBytes, formatSeconds, formatTime, h, okBox, replace } from "../console.js";

const ACTIVE = new Set(["queued", "running"]);

function patterns(id) {
  return document.getElementById(id).value.split(/[\s,]+/).filter(Boolean);
}

function pullBody(dryRun) {
  const body = { source: document.getElementById("pull-source").value.trim(), dry_run: dryRun };
  const text = (id) => document.getElementById(id).value.trim();
  if (text("pull-name")) body.name = text("pull-name");
  if (text("pull-quantization")) body.quantization = text("pull-quantization");
  if (text("pull-target")) body.target_dir = text("pull-target");
  body.include = patterns("pull-include");
  body.exclude = patterns("pull-exclude");
  return body;
}

function planBox(plan) {
  return okBox(
    h("p", {}, h("strong", {}, `${plan.files.length} file(s), ${formatBytes(plan.total_bytes)}`), ` from ${plan.source} (commit ${plan.commit ?? plan.revision ?? "–"}) into `, h("code", {}, plan.target)),
    h("p", {}, `needs ${formatBytes(plan.needed_bytes)} with headroom; ${formatBytes(plan.free_bytes)} free there.`),
    plan.skipped.length ? h("p", { class: "muted" }, `left out: ${plan.skipped.join(", ")}`) : null,
    h("p", { class: "muted" }, "Nothing was stored: press Pull to start."),
  );
}

function bar(fraction) {
  const percent = Math.max(0, Math.min(100, Math.round((fraction ?? 0) * 1000) / 10));
  const filled = h("span");
  filled.style.width = `${percent}%`;  // through the CSSOM: the page's CSP refuses style attributes
  return h("div", { class: "progress-bar", role: "progressbar", "aria-valuemin": "0", "aria-valuemax": "100", "aria-valuenow": String(percent), "aria-label": "done" }, filled);
}

function rate(task) {
  if (task.rate_bytes_per_second === null || task.rate_bytes_per_second === undefined) return null;
  const left = task.seconds_left === null || task.seconds_left === undefined ? "" : `, ${formatSeconds(task.seconds_left)} left`;
  return `${formatBytes(task.rate_bytes_per_second)}/s${left}`;
}

export class ModelPulls {
  constructor({ onModelsChanged }) {
    this.onModelsChanged = onModelsChanged;
    this.form = document.getElementById("pull-model");
    this.result = document.getElementById("pull-result");
    this.list = document.getElementById("tasks");
    this.states = "";
    this.timer = null;
    this.userOpen = new Map();  // task id -> the files list opened (true) or closed by the user
    this.form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.pull(false);
    });
    document.getElementById("pull-plan").addEventListener("click", () => {
      if (this.form.reportValidity()) this.pull(true);
    });
  }

  async pull(dryRun) {
    const buttons = this.form.querySelectorAll("button");
    buttons.forEach((button) => { button.disabled = true; });
    replace(this.result, h("p", { class: "muted" }, dryRun ? "Asking the hub for the files…" : "Starting the pull…"));
    try {
      const answer = await api("/models/pull", { method: "POST", json: pullBody(dryRun) });
      if (dryRun) {
        replace(this.result, planBox(answer));
      } else {
        replace(this.result, okBox(`Pulling ${answer.model}: task ${answer.id}, ${formatBytes(answer.total_bytes)}.`));
        this.form.reset();
        await this.refresh();
        await this.onModelsChanged();
      }
    } catch (error) {
      replace(this.result, errorBox(error));
    } finally {
      buttons.forEach((button) => { button.disabled = false; });
    }
  }

  async act(task, action) {
    try {
      await api(`/tasks/${task.id}/${action}`, { method: "POST" });
      replace(this.result, okBox(`Task ${task.id} ${action === "cancel" ? "cancelled" : "resumed"}.`));
    } catch (error) {
      replace(this.result, errorBox(error));
    }
    await this.refresh();
    await this.onModelsChanged();
  }

  taskCard(task) {
    const done = `${formatBytes(task.done_bytes)} of ${formatBytes(task.total_bytes)} (${Math.floor((task.fraction_done ?? 0) * 100)} %)`;
    const files = task.files ?? [];
    // Open while the task runs, unless the user closed it (and kept as the user left it).
    const open = this.userOpen.get(task.id) ?? ACTIVE.has(task.state);
    return h(
      "article",
      { class: "card task", dataset: { task: task.id, state: task.state } },
      h("h3", {}, `Task ${task.id}: ${task.kind} `, h("span", { class: "mono" }, task.model ?? ""), " ", badge(task.state)),
      h("p", { class: "muted small" }, task.source ?? "", task.target ? " → " : "", task.target ? h("code", {}, task.target) : null),
      bar(task.fraction_done),
      h("p", { class: "task-progress" }, done, rate(task) ? ` · ${rate(task)}` : "", task.phase ? ` · ${task.phase}` : ""),
      task.reason ? h("p", { class: task.state === "failed" ? "error" : "muted" }, task.reason) : null,
      h("div", { class: "actions" },
        ACTIVE.has(task.state) ? controlButton("POST /api/v1/tasks/{task_id}/cancel", { class: "secondary", "aria-label": `Cancel task ${task.id}`, onclick: () => this.act(task, "cancel") }, "Cancel") : null,
        task.state === "failed" || task.state === "cancelled" ? controlButton("POST /api/v1/tasks/{task_id}/resume", { "aria-label": `Resume task ${task.id}`, onclick: () => this.act(task, "resume") }, "Resume") : null),
      files.length ? h("details", { open },
        h("summary", { onclick: (event) => this.userOpen.set(task.id, !event.currentTarget.parentElement.open) }, `${files.length} file(s)`),
        h("ul", { class: "files" }, files.map((file) => h("li", { dataset: { file: file.path } },
          h("code", {}, file.path), " ", badge(file.state), " ",
          h("span", {}, `${formatBytes(file.bytes)} of ${formatBytes(file.size)}`),
          file.rate_bytes_per_second ? h("span", { class: "muted" }, ` · ${formatBytes(file.rate_bytes_per_second)}/s`) : null,
          file.retries || file.restarts ? h("span", { class: "muted" }, ` · ${file.retries ?? 0} retries, ${file.restarts ?? 0} refetches`) : null,
          file.error ? h("div", { class: "error" }, file.error) : null)))) : null,
      h("p", { class: "muted small" }, `created ${formatTime(task.created_at)}${task.finished_at ? `, ended ${formatTime(task.finished_at)}` : ""}`),
    );
  }

  async refresh() {
    let tasks;
    try {
      tasks = await api("/tasks");
    } catch (error) {
      if (error instanceof ApiError && error.status === 401) return false;
      throw error;
    }
    replace(this.list, tasks.length ? tasks.map((task) => this.taskCard(task))
      : h("p", { class: "muted" }, "No tasks yet: a pull, an import or an export shows here."));
    const states = tasks.map((task) => `${task.id}:${task.state}`).join(",");
    if (states !== this.states) {
      const first = this.states === "";
      this.states = states;
      if (!first) await this.onModelsChanged();  // a pull that ended changes its model's state
    }
    return tasks.some((task) => ACTIVE.has(task.state));
  }

  /** Refresh every second while a task runs, every 5 s otherwise (paused in a hidden tab). */
  start() {
    const tick = async () => {
      let active = false;
      if (document.visibilityState === "visible") {
        try {
          active = await this.refresh();
        } catch (error) {
          console.warn("tasks:", error.message);
        }
      }
      this.timer = setTimeout(tick, active ? 1000 : 5000);
    };
    tick();
  }
}

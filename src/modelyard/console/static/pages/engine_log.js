// The engine log of a deployment's page: pick an instance and one of its starts (every start that
// left a log, from GET .../logs/starts); the current start is streamed live (follow=true), an
// earlier one is read whole.
import { ApiError, api, formatBytes, formatTime, h, replace } from "../console.js";

export class EngineLog {
  constructor(path) {
    this.path = path;
    this.element = document.getElementById("log");
    this.instanceSelect = document.getElementById("log-instance");
    this.startSelect = document.getElementById("log-start");
    this.follow = document.getElementById("log-follow");
    this.instances = [];
    this.abort = null;
    this.streamKey = "";
    this.startsKey = "";
    this.instanceSelect.addEventListener("change", () => this.update());
    this.startSelect.addEventListener("change", () => this.stream());
    this.follow.addEventListener("change", () => this.stream());
  }

  /** The deployment's instances changed (a poll): refresh the choices, keep what is selected. */
  async show(instances) {
    this.instances = instances;
    const wanted = this.instanceSelect.value;
    replace(this.instanceSelect, instances.map((i) =>
      h("option", { value: i.id, selected: String(i.id) === wanted }, `replica ${i.replica_index} (instance ${i.id})`)));
    await this.update();
  }

  selectedInstance() {
    return this.instances.find((i) => String(i.id) === this.instanceSelect.value) ?? null;
  }

  async update() {
    const instance = this.selectedInstance();
    if (!instance) return;
    // The starts change only when the instance starts again: ask then, not at every poll.
    const key = `${instance.id}/${instance.start_count}/${instance.log_path ?? ""}`;
    if (key !== this.startsKey) {
      this.startsKey = key;
      await this.fillStarts(instance);
    }
    this.stream();  // not awaited: a followed log streams until it is replaced
  }

  async fillStarts(instance) {
    const wanted = this.startSelect.value;
    let starts = [];
    if (instance.log_path) {
      try {
        starts = (await api(`${this.path}/logs/starts?instance=${instance.id}`)).starts;
      } catch (error) {
        if (!(error instanceof ApiError && error.status === 404)) throw error;
      }
    }
    const options = starts.slice().reverse().map((start) => h(
      "option",
      { value: start.current ? "current" : String(start.start), selected: (start.current ? "current" : String(start.start)) === wanted },
      `start ${start.start}${start.current ? " (current)" : ""}: ${formatBytes(start.size_bytes)}, ${formatTime(start.modified_at)}`,
    ));
    replace(this.startSelect, options.length ? options : h("option", { value: "current" }, "current start"));
  }

  async stream() {
    const instance = this.selectedInstance();
    if (!instance?.log_path) {
      if (!this.element.textContent) this.element.textContent = "No log yet: the engine has not been started.";
      return;
    }
    const start = this.startSelect.value || "current";
    const current = start === "current";
    this.follow.disabled = !current;
    const following = current && this.follow.checked;
    const key = `${instance.id}/${start}/${following}`;
    if (key === this.streamKey) return;
    this.streamKey = key;
    this.abort?.abort();
    const abort = new AbortController();
    this.abort = abort;
    this.element.textContent = "";
    this.element.dataset.instance = String(instance.id);
    this.element.dataset.start = start;
    this.element.dataset.loaded = "false";
    const query = new URLSearchParams({ instance: instance.id, tail: "500" });
    if (!current) query.set("start", start);
    else if (following) query.set("follow", "true");
    try {
      const response = await api(`${this.path}/logs?${query}`, { raw: true, signal: abort.signal });
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        const atBottom = this.element.scrollTop + this.element.clientHeight >= this.element.scrollHeight - 8;
        this.element.append(decoder.decode(value, { stream: true }));
        if (atBottom) this.element.scrollTop = this.element.scrollHeight;
      }
      this.element.dataset.loaded = "true";
    } catch (error) {
      if (abort.signal.aborted) return;
      this.element.textContent = error instanceof ApiError ? `${error.message}${error.hint ? ` (${error.hint})` : ""}` : String(error);
    }
    // A followed stream that ended (the instance went away) may be started again by the next poll;
    // a whole earlier start stays as it is.
    if (this.abort === abort && following) this.streamKey = "";
  }

  stop() {
    this.abort?.abort();
  }
}

// The engine log of a deployment's page: pick an instance and one of its starts (every start that
// left a log, from GET .../logs/starts); the current start is streamed live (follow=true), an
// earlier one is read whole. The sizes in the start menu are asked again when the followed log
// grows (at the next poll) and when the menu is opened, so they are never those of page load.
import { ApiError, api, formatBytes, formatTime, h, replace } from "../console.js";

function startValue(start) {
  return start.current ? "current" : String(start.start);
}

function startLabel(start) {
  return `start ${start.start}${start.current ? " (current)" : ""}: ${formatBytes(start.size_bytes)}, ${formatTime(start.modified_at)}`;
}

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
    // The followed log received bytes since the sizes were last asked.
    this.grown = false;
    this.sizesAsked = null;
    this.instanceSelect.addEventListener("change", () => this.update());
    this.startSelect.addEventListener("change", () => this.stream());
    // Opening the menu (a click, or the keyboard's focus) asks for the sizes as they are now.
    for (const event of ["pointerdown", "focus"]) {
      this.startSelect.addEventListener(event, () => this.refreshSizes());
    }
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
    if (!instance) {
      if ("placeholder" in this.element.dataset) {
        delete this.element.dataset.placeholder;
        this.element.textContent = "No instance: scale the deployment up to start one.";
      }
      return;
    }
    // The starts change only when the instance starts again: ask then, not at every poll.
    const key = `${instance.id}/${instance.start_count}/${instance.log_path ?? ""}`;
    if (key !== this.startsKey) {
      this.startsKey = key;
      this.grown = false;
      await this.fillStarts(instance);
    } else if (this.grown) {
      await this.refreshSizes();
    }
    this.stream();  // not awaited: a followed log streams until it is replaced
  }

  async startsOf(instance) {
    if (!instance.log_path) return [];
    try {
      return (await api(`${this.path}/logs/starts?instance=${instance.id}`)).starts;
    } catch (error) {
      if (!(error instanceof ApiError && error.status === 404)) throw error;
      return [];
    }
  }

  async fillStarts(instance) {
    const wanted = this.startSelect.value;
    const starts = await this.startsOf(instance);
    const options = starts.slice().reverse().map((start) => h(
      "option",
      { value: startValue(start), selected: startValue(start) === wanted },
      startLabel(start),
    ));
    replace(this.startSelect, options.length ? options : h("option", { value: "current" }, "current start"));
  }

  /** Ask for the starts' sizes again and write them into the menu's options in place (the menu
   * may be open: its options are not replaced, only their text). One request at a time. */
  async refreshSizes() {
    const instance = this.selectedInstance();
    if (!instance?.log_path || this.sizesAsked) return;
    this.grown = false;
    this.sizesAsked = this.startsOf(instance);
    try {
      const starts = await this.sizesAsked;
      const byValue = new Map(starts.map((start) => [startValue(start), start]));
      const values = [...this.startSelect.options].map((option) => option.value);
      if (values.length !== byValue.size || values.some((value) => !byValue.has(value))) {
        await this.fillStarts(instance);
        return;
      }
      for (const option of this.startSelect.options) {
        const label = startLabel(byValue.get(option.value));
        if (option.textContent !== label) option.textContent = label;
      }
    } finally {
      this.sizesAsked = null;
    }
  }

  async stream() {
    const instance = this.selectedInstance();
    if (!instance?.log_path) {
      if (!this.element.textContent || "placeholder" in this.element.dataset) {
        delete this.element.dataset.placeholder;
        this.element.textContent = "No log yet: the engine has not been started.";
      }
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
    delete this.element.dataset.placeholder;
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
        this.grown = true;
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

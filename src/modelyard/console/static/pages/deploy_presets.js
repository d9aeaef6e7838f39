// The deploy form's presets (GET /api/v1/presets): those written for the chosen model's
// architecture first, then the others. Choosing one asks the server to check it against the model
// (GET /api/v1/presets/{name}?model=, 409 for another architecture) and fills the form with it.
import { ApiError, api, errorBox, h, okBox, replace } from "../console.js";

export class Presets {
  constructor({ select, info, model, fill, known }) {
    this.select = select;
    this.info = info;
    this.model = model;
    this.fill = fill;
    this.known = known;
    this.select.addEventListener("change", () => this.choose());
  }

  async load() {
    const model = this.model();
    const [all, fitting] = await Promise.all([
      api("/presets"),
      model ? api(`/presets?model=${encodeURIComponent(model)}`).catch((error) => {
        if (error instanceof ApiError && error.status === 404) return [];
        throw error;
      }) : [],
    ]);
    const fittingNames = new Set(fitting.map((preset) => preset.name));
    const option = (preset) => h("option", { value: preset.name }, `${preset.name}: ${preset.backend} ${preset.version}, ${preset.gpus} GPU(s)`);
    const wanted = this.select.value;
    replace(
      this.select,
      h("option", { value: "" }, "none: choose them yourself"),
      fitting.length ? h("optgroup", { label: `For ${model}` }, fitting.map(option)) : null,
      h("optgroup", { label: fitting.length ? "For other models" : "For other models (none is written for this one)" },
        all.filter((preset) => !fittingNames.has(preset.name)).map(option)),
    );
    this.select.value = wanted && [...this.select.options].some((o) => o.value === wanted) ? wanted : "";
    this.select.dataset.loaded = "true";
  }

  async choose() {
    const name = this.select.value;
    if (!name) {
      replace(this.info);
      return;
    }
    const model = this.model();
    try {
      const preset = await api(`/presets/${encodeURIComponent(name)}?model=${encodeURIComponent(model)}`);
      if (!this.known(preset)) {
        replace(this.info, errorBox({ message: `preset ${name} needs ${preset.backend} ${preset.version}, which this server's backends do not have`, hint: "add that version on the backends page" }));
        return;
      }
      this.fill(preset);
      replace(this.info, okBox(
        h("p", {}, h("strong", {}, preset.title)),
        h("p", {}, `${preset.backend} ${preset.version}, ${preset.gpus} GPU(s) per replica, context ${preset.context_tokens.toLocaleString("en")} tokens; fits ${preset.fits_as.join(", ") || "no GPU type the estimator knows"}.`),
        h("p", { class: "muted" }, "The form now holds the preset's values: change any of them before deploying."),
      ));
    } catch (error) {
      replace(this.info, errorBox(error));
      this.select.value = "";
    }
  }
}

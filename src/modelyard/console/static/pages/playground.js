// Playground: a streamed chat through the gateway (/v1) with the console's own key. Reasoning is
// folded above the answer, tool calls are shown as such, every answer gets its usage, TTFT and
// tokens/s, and "view code" gives the last request as curl, Python (openai) and JavaScript.
import { api, copyText, h, main, replace } from "../console.js";

const EXAMPLE_TOOLS = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "Get the current weather in a city.",
      parameters: {
        type: "object",
        properties: { city: { type: "string", description: "The city, e.g. Paris" } },
        required: ["city"],
      },
    },
  },
];
// Engines that refuse unknown request fields: chat_template_kwargs is not sent to them.
const NO_TEMPLATE_KWARGS = new Set(["transformers"]);
const KEY_PLACEHOLDER = "MODELYARD_API_KEY";

const consoleKey = main().dataset.consoleKey;
const deploymentSelect = document.getElementById("deployment");
const messagesElement = document.getElementById("messages");
const toolsInput = document.getElementById("tools");
const useTools = document.getElementById("use-tools");
const thinking = document.getElementById("thinking");
const codePanel = document.getElementById("code");
const codeText = document.getElementById("code-text");
const sendButton = document.getElementById("send");
const stopButton = document.getElementById("stop");
let deployments = [];
let history = [];
let lastBody = null;
let language = "curl";
let running = null;

function baseUrl() {
  return `${location.origin}/v1`;
}

function selectedDeployment() {
  return deployments.find((d) => d.name === deploymentSelect.value);
}

function templateKwargsAllowed() {
  const deployment = selectedDeployment();
  return !deployment || !NO_TEMPLATE_KWARGS.has(deployment.backend);
}

// The user's choice, kept while the box is disabled (a disabled box shows what is really sent).
let thinkingChoice = thinking.checked;
thinking.addEventListener("change", () => { thinkingChoice = thinking.checked; });

function updateThinkingNote() {
  const allowed = templateKwargsAllowed();
  const note = document.getElementById("thinking-note");
  if (allowed) {
    thinking.disabled = false;
    thinking.indeterminate = false;
    thinking.checked = thinkingChoice;
    note.textContent = "";
    thinking.removeAttribute("aria-describedby");
    return;
  }
  // Nothing is sent: the box is neither on nor off, and says why it cannot be changed.
  thinking.disabled = true;
  thinking.checked = false;
  thinking.indeterminate = true;
  note.textContent = `Not sent: this engine (${selectedDeployment().backend}) refuses chat_template_kwargs, so the model's chat template decides whether it thinks.`;
  thinking.setAttribute("aria-describedby", "thinking-note");
}

function requestBody(userText) {
  const messages = [];
  const system = document.getElementById("system").value.trim();
  if (system) messages.push({ role: "system", content: system });
  messages.push(...history, { role: "user", content: userText });
  const body = {
    model: deploymentSelect.value,
    messages,
    stream: true,
    stream_options: { include_usage: true },
    temperature: Number(document.getElementById("temperature").value),
    max_tokens: Number(document.getElementById("max_tokens").value),
  };
  if (templateKwargsAllowed()) body.chat_template_kwargs = { enable_thinking: thinking.checked };
  if (useTools.checked && toolsInput.value.trim()) body.tools = JSON.parse(toolsInput.value);
  return body;
}

// -- view code ---------------------------------------------------------------------------------

function pythonLiteral(value, indent = "") {
  const inner = `${indent}    `;
  if (value === null) return "None";
  if (value === true) return "True";
  if (value === false) return "False";
  if (Array.isArray(value)) {
    if (!value.length) return "[]";
    return `[\n${value.map((item) => inner + pythonLiteral(item, inner)).join(",\n")},\n${indent}]`;
  }
  if (typeof value === "object") {
    const entries = Object.entries(value);
    if (!entries.length) return "{}";
    return `{\n${entries.map(([key, item]) => `${inner}${JSON.stringify(key)}: ${pythonLiteral(item, inner)}`).join(",\n")},\n${indent}}`;
  }
  return JSON.stringify(value);
}

const OPENAI_PYTHON_PARAMETERS = new Set(["model", "messages", "stream", "stream_options", "temperature", "max_tokens", "tools", "tool_choice", "top_p", "stop", "seed"]);

export function codeFor(body, kind) {
  if (kind === "curl") {
    const json = JSON.stringify(body, null, 2).replaceAll("'", "'\\''");
    return `curl ${baseUrl()}/chat/completions \\\n  -H "Authorization: Bearer $${KEY_PLACEHOLDER}" \\\n  -H "Content-Type: application/json" \\\n  -d '${json}'`;
  }
  if (kind === "python") {
    const known = Object.entries(body).filter(([key]) => OPENAI_PYTHON_PARAMETERS.has(key));
    const extra = Object.fromEntries(Object.entries(body).filter(([key]) => !OPENAI_PYTHON_PARAMETERS.has(key)));
    const lines = known.map(([key, value]) => `    ${key}=${pythonLiteral(value, "    ")},`);
    if (Object.keys(extra).length) lines.push(`    extra_body=${pythonLiteral(extra, "    ")},`);
    return [
      "import os",
      "",
      "from openai import OpenAI",
      "",
      `client = OpenAI(base_url=${JSON.stringify(baseUrl())}, api_key=os.environ[${JSON.stringify(KEY_PLACEHOLDER)}])`,
      "stream = client.chat.completions.create(",
      ...lines,
      ")",
      "for chunk in stream:",
      "    if chunk.choices:",
      '        print(chunk.choices[0].delta.content or "", end="", flush=True)',
    ].join("\n");
  }
  return [
    'import OpenAI from "openai";',
    "",
    `const client = new OpenAI({ baseURL: ${JSON.stringify(baseUrl())}, apiKey: process.env.${KEY_PLACEHOLDER} });`,
    `const stream = await client.chat.completions.create(${JSON.stringify(body, null, 2)});`,
    "for await (const chunk of stream) {",
    '  process.stdout.write(chunk.choices[0]?.delta?.content ?? "");',
    "}",
  ].join("\n");
}

function showCode() {
  for (const kind of ["curl", "python", "javascript"]) {
    document.getElementById(`tab-${kind}`).setAttribute("aria-selected", String(kind === language));
  }
  codeText.textContent = lastBody ? codeFor(lastBody, language) : "Send a message first: the code is the request the playground sent.";
}

document.getElementById("view-code").addEventListener("click", (event) => {
  codePanel.hidden = !codePanel.hidden;
  event.currentTarget.setAttribute("aria-expanded", String(!codePanel.hidden));
  showCode();
});
for (const kind of ["curl", "python", "javascript"]) {
  document.getElementById(`tab-${kind}`).addEventListener("click", () => {
    language = kind;
    showCode();
  });
}
document.getElementById("copy-code").addEventListener("click", (event) => copyText(codeText.textContent, event.currentTarget));

// -- chat --------------------------------------------------------------------------------------

function messageView(role) {
  const reasoningText = h("div", { class: "reasoning-text" });
  const reasoning = h("details", { class: "reasoning", hidden: true }, h("summary", {}, "Reasoning"), reasoningText);
  const content = h("div", { class: "content" });
  const tools = h("div", { class: "tool-calls" });
  const stats = h("div", { class: "stats" });
  const element = h("article", { class: `message ${role}` }, h("div", { class: "role" }, role), reasoning, content, tools, stats);
  messagesElement.append(element);
  return { element, reasoning, reasoningText, content, tools, stats };
}

function showToolCalls(view, calls) {
  replace(view.tools, calls.map((call) =>
    h("div", { class: "tool-call" }, h("strong", {}, "Tool call: "), h("code", {}, call.function.name || "?"),
      h("pre", {}, call.function.arguments || ""))));
}

async function send(text, body) {
  lastBody = body;
  if (!codePanel.hidden) showCode();
  const userView = messageView("user");
  userView.content.textContent = text;
  const view = messageView("assistant");
  view.content.textContent = "…";
  const abort = new AbortController();
  running = abort;
  sendButton.disabled = true;
  stopButton.disabled = false;
  const started = performance.now();
  let firstTokenAt = null;
  let answer = "";
  let reasoning = "";
  let usage = null;
  const calls = [];
  try {
    const response = await fetch(`${baseUrl()}/chat/completions`, {
      method: "POST",
      headers: { Authorization: `Bearer ${consoleKey}`, "Content-Type": "application/json" },
      body: JSON.stringify(body),
      signal: abort.signal,
    });
    if (!response.ok) {
      const error = await response.json().catch(() => ({}));
      throw new Error(error?.error?.message ?? `HTTP ${response.status}`);
    }
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const event = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        for (const line of event.split("\n")) {
          if (!line.startsWith("data:")) continue;
          const data = line.slice(5).trim();
          if (data === "[DONE]") continue;
          const chunk = JSON.parse(data);
          if (chunk.usage) usage = chunk.usage;
          const delta = chunk.choices?.[0]?.delta ?? {};
          const reasoningPiece = delta.reasoning_content ?? delta.reasoning ?? "";
          if ((delta.content || reasoningPiece || delta.tool_calls) && firstTokenAt === null) firstTokenAt = performance.now();
          if (reasoningPiece) {
            reasoning += reasoningPiece;
            view.reasoning.hidden = false;
            view.reasoningText.textContent = reasoning;
            view.reasoning.querySelector("summary").textContent = `Reasoning (${reasoning.length} characters)`;
          }
          if (delta.content) {
            answer += delta.content;
            view.content.textContent = answer;
          }
          for (const piece of delta.tool_calls ?? []) {
            const index = piece.index ?? 0;
            calls[index] ??= { id: piece.id, type: "function", function: { name: "", arguments: "" } };
            if (piece.id) calls[index].id = piece.id;
            if (piece.function?.name) calls[index].function.name += piece.function.name;
            if (piece.function?.arguments) calls[index].function.arguments += piece.function.arguments;
            showToolCalls(view, calls.filter(Boolean));
          }
        }
      }
    }
    if (!answer) view.content.textContent = calls.length ? "" : "(no text)";
    history.push({ role: "user", content: text }, { role: "assistant", content: answer });
    const finished = performance.now();
    const parts = [];
    if (usage) parts.push(`${usage.prompt_tokens} prompt + ${usage.completion_tokens} completion tokens`);
    if (firstTokenAt !== null) parts.push(`TTFT ${Math.round(firstTokenAt - started)} ms`);
    if (usage && firstTokenAt !== null && finished > firstTokenAt) {
      parts.push(`${(usage.completion_tokens / ((finished - firstTokenAt) / 1000)).toFixed(1)} tokens/s`);
    }
    parts.push(`${Math.round(finished - started)} ms in all`);
    view.stats.textContent = parts.join(" · ");
    view.element.dataset.done = "true";
  } catch (error) {
    view.content.textContent = "";
    view.element.dataset.done = "true";
    view.stats.textContent = abort.signal.aborted ? "stopped" : "";
    if (!abort.signal.aborted) view.content.append(h("div", { class: "error", role: "alert" }, error.message));
  } finally {
    running = null;
    sendButton.disabled = false;
    stopButton.disabled = true;
  }
}

document.getElementById("chat-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const prompt = document.getElementById("prompt");
  const text = prompt.value.trim();
  if (!text || running) return;
  let body;
  try {
    body = requestBody(text);
  } catch (error) {
    messagesElement.append(h("div", { class: "error", role: "alert" }, `The tools are not valid JSON: ${error.message}`));
    return;
  }
  prompt.value = "";
  send(text, body);
});
document.getElementById("prompt").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) document.getElementById("chat-form").requestSubmit();
});
stopButton.addEventListener("click", () => running?.abort());
document.getElementById("clear").addEventListener("click", () => {
  history = [];
  replace(messagesElement);
});
document.getElementById("example-tool").addEventListener("click", () => {
  toolsInput.value = JSON.stringify(EXAMPLE_TOOLS, null, 2);
  useTools.checked = true;
});
deploymentSelect.addEventListener("change", updateThinkingNote);

async function load() {
  deployments = await api("/deployments");
  const wanted = new URLSearchParams(location.search).get("deployment");
  replace(deploymentSelect, deployments.length
    ? deployments.map((d) => h("option", { value: d.name, selected: d.name === wanted }, `${d.name} (${d.state})`))
    : h("option", { value: "" }, "no deployments yet"));
  updateThinkingNote();
}

load();

// The page of `turnformer serve`: a conversation typed turn by turn (or pasted), each utterance annotated by the
// session's models as it arrives, and for a chosen utterance what DialogXL's head types attend to. Plain DOM, no
// build step; user text only ever goes in through textContent.
"use strict";

const state = { models: [], session: null, sessionModels: [], turns: [], maxTurns: 200 };
const $ = (id) => document.getElementById(id);

function element(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  if (className) node.className = className;
  return node;
}

function setStatus(message, isError = false) {
  $("status").textContent = message;
  $("status").className = isError ? "error" : "";
}

async function api(method, path, body) {
  const headers = { "Content-Type": "application/json" };
  const token = $("token").value.trim();
  if (token) headers.Authorization = `Bearer ${token}`;
  const response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const data = await response.json().catch(() => ({}));
  if (response.status === 401) $("token-row").hidden = false;
  if (!response.ok) {
    const error = new Error(data.error || `${response.status} ${response.statusText}`);
    error.status = response.status;
    throw error;
  }
  return data;
}

const can = (model, ability) => model.serves.includes(ability);

async function loadModels() {
  try {
    const listed = await api("GET", "/v1/models");
    state.models = listed.models;
    state.maxTurns = listed.max_turns || state.maxTurns;
  } catch (error) {
    $("models").textContent = "";
    return setStatus(`Could not list the models: ${error.message}`, true);
  }
  const box = $("models");
  box.textContent = "";
  for (const model of state.models.filter((m) => can(m, "stream"))) {
    const label = element("label");
    const check = element("input");
    Object.assign(check, { type: "checkbox", checked: true, value: model.name });
    check.dataset.model = model.name;
    label.append(check, ` ${model.name} (${model.task}, ${model.model})`);
    box.append(label);
  }
  if (!box.children.length) box.textContent = "no loaded model annotates conversations";
  document.body.dataset.ready = "true";
}

async function start() {
  const names = [...document.querySelectorAll("#models input:checked")].map((c) => c.value);
  try {
    const created = await api("POST", "/v1/sessions", { models: names });
    state.session = created.session;
    state.sessionModels = created.models;
    state.turns = [];
    document.body.dataset.session = created.session;
    $("session-info").textContent = `session ${created.session}`;
    $("turns").textContent = "";
    $("attention").hidden = true;
    const columns = $("columns");
    while (columns.children.length > 3) columns.lastChild.remove();
    for (const name of created.models) {
      const model = state.models.find((m) => m.name === name);
      columns.append(element("th", `${name} (${model.label_kind || model.task})`));
    }
    setStatus("Type who speaks and what they say.");
    $("text").focus();
  } catch (error) {
    setStatus(error.message, true);
  }
}

function probabilityBars(probabilities) {
  const bars = element("div", undefined, "bars");
  const top = Object.entries(probabilities).sort((a, b) => b[1] - a[1]).slice(0, 3);
  for (const [label, p] of top) {
    const bar = element("div", undefined, "bar");
    const fill = element("span");
    fill.style.width = `${Math.round(p * 100)}%`;
    bar.append(fill);
    bars.append(element("span", label), bar, element("span", p.toFixed(2)));
  }
  return bars;
}

function addRow(entry) {
  const row = element("tr");
  row.dataset.turn = entry.turn;
  row.append(element("td", String(entry.turn)), element("td", entry.speaker), element("td", entry.text));
  for (const name of state.sessionModels) {
    const answer = entry.annotations[name];
    const cell = element("td");
    cell.dataset.model = name;
    cell.append(element("span", answer.label, "label"));
    if (answer.truncated) cell.append(element("span", " (cut)", "truncated"));
    cell.append(probabilityBars(answer.probabilities));
    row.append(cell);
  }
  row.addEventListener("click", () => showAttention(entry.turn));
  $("turns").append(row);
}

async function addTurn(speaker, text) {
  if (!state.session) await start();
  if (!state.session) return false;
  try {
    const entry = await api("POST", `/v1/sessions/${encodeURIComponent(state.session)}/utterances`, { speaker, text });
    state.turns.push({ speaker: entry.speaker, text: entry.text });
    addRow(entry);
    setStatus(`${state.turns.length} utterance(s).`);
    return true;
  } catch (error) {
    if (error.status === 410 || error.status === 404) {
      state.session = null;
      setStatus(`${error.message} (New conversation starts one.)`, true);
    } else {
      setStatus(error.message, true);
    }
    return false;
  }
}

// One change to the conversation at a time: a second Enter (or click) while the first is being sent would start a
// second session or send the utterance twice, and the table would no longer be the session's turns.
let busy = false;

function oneAtATime(work) {
  return async (event) => {
    if (event) event.preventDefault();
    if (busy) return;
    busy = true;
    for (const id of ["start", "add", "add-all"]) $(id).disabled = true;
    try {
      await work();
    } finally {
      busy = false;
      for (const id of ["start", "add", "add-all"]) $(id).disabled = false;
    }
  };
}

async function submitTurn() {
  const speaker = $("speaker").value.trim();
  const text = $("text").value;
  if (!speaker || !text.trim()) return setStatus("Give a speaker and a text.", true);
  if (await addTurn(speaker, text)) $("text").value = "";
}

async function addAll() {
  const lines = $("paste").value.split("\n").filter((line) => line.trim());
  for (const [i, line] of lines.entries()) {
    const colon = line.indexOf(":");
    if (colon < 1) return setStatus(`line ${i + 1}: expected "speaker: text"`, true);
    if (!(await addTurn(line.slice(0, colon).trim(), line.slice(colon + 1).trim()))) return;
  }
  $("paste").value = "";
  $("paste").closest("details").open = false;
}

function attentionModel() {
  const able = state.models.filter((m) => can(m, "attention"));
  return able.find((m) => state.sessionModels.includes(m.name)) || able[0];
}

async function showAttention(turn) {
  const model = attentionModel();
  if (!model) return setStatus("No loaded model shows its attention (a DialogXL emotion model does).");
  document.querySelectorAll("#turns tr").forEach((row) => row.classList.toggle("chosen", Number(row.dataset.turn) === turn));
  try {
    // a request holds at most maxTurns turns: the newest of them up to this one (numbered here as in the session)
    const first = Math.max(0, turn + 1 - state.maxTurns);
    const view = await api("POST", "/v1/attention", { model: model.name, turns: state.turns.slice(first, turn + 1), utterance: turn - first });
    drawAttention(view, first);
  } catch (error) {
    setStatus(error.message, true);
  }
}

function drawAttention(view, first = 0) {
  const read = first ? `; read from utterance ${first} on, the newest ${state.maxTurns}` : "";
  $("attention-title").textContent =
    `What ${view.model}'s head types attend to from utterance ${view.utterance + first}'s [CLS] (last layer; each row scaled to its largest weight on an earlier utterance${read})`;
  const heads = $("heads");
  heads.textContent = "";
  for (const [kind, weights] of Object.entries(view.weights)) {
    const earlier = weights.filter((_, k) => view.key_utterance[k] !== view.utterance);
    const scale = Math.max(...earlier, 1e-9);
    const line = element("div", undefined, "head");
    line.dataset.head = kind;
    line.append(element("b", `${kind} (${view.head_counts[kind]})`));
    const tokens = element("span", undefined, "tokens");
    view.tokens.forEach((token, k) => {
      if (k === 0 || view.key_utterance[k] !== view.key_utterance[k - 1]) {
        tokens.append(element("span", `${view.key_utterance[k] + first} ${view.speaker[k]}:`, "cut"));
      }
      const span = element("span", token);
      const strength = Math.min(1, weights[k] / scale);
      span.style.background = `rgba(74, 111, 208, ${strength.toFixed(3)})`;
      if (strength > 0.6) span.style.color = "#fff";
      span.title = weights[k].toFixed(4);
      tokens.append(span);
    });
    line.append(tokens);
    heads.append(line);
  }
  $("attention").hidden = false;
}

$("start").addEventListener("click", oneAtATime(start));
$("turn-form").addEventListener("submit", oneAtATime(submitTurn));
$("add-all").addEventListener("click", oneAtATime(addAll));
$("token").addEventListener("change", loadModels);
loadModels();

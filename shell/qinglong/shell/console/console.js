// The web console: a client of the user API, like the `qinglong` CLI (docs/decisions/0010-web-console.md).
// Touches this tab's session storage (the bearer token and the Project, typed once) and the user API of its own
// origin (fetch with `Authorization: Bearer …`; never a token in a URL or a cookie). It decides nothing: what the
// role allows comes from the Project's view (PATHS.PROJECT), and every action is the API's to accept or refuse.
// Views (the URL fragment): #/runs (filters, pages, auto-refresh, enqueue), #/run/<id> (status, start, duration,
// Worker, a readable timeline, each Attempt's output, the newest followed at its tail, cancel after a confirmation),
// #/tasks (plans, schedules, last Runs, run now, enable or disable), #/task/<name> (a task: a new revision, its
// schedule with the next fire times previewed as it is typed), #/new-task, #/workers (online or offline), #/notify
// (rules and the latest notifications with their attempts, read only). Every value from the API reaches the page as
// text (textContent), never as markup. Times are the browser's local time with its zone (UTC on hover). The paths,
// schemas and statuses of the wire come from wire.js, which the shell makes from qinglong.wire.

import {
  CANCELLATION_SCHEMA, ENDED_RUN_STATUSES, ENDS, ENQUEUE_SCHEMA, PATHS, RUN_STATUSES, START_FAILURES, TASK_SCHEMA,
} from "./wire.js";

const TOKEN_KEY = "qinglong.token";
const PROJECT_KEY = "qinglong.project";
const TERMINAL = new Set(ENDED_RUN_STATUSES);
const REFRESH_MS = 5000;
const FOLLOW_MS = 1000;
const PREVIEW_DELAY_MS = 300;  // a schedule's preview waits for a pause in typing
const TAIL_SLACK_PX = 24;      // an output box scrolled to within this of its end follows the tail
const ZONE = Intl.DateTimeFormat().resolvedOptions().timeZone;
const STAMP = new Intl.DateTimeFormat("en-CA", { year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit",
  minute: "2-digit", second: "2-digit", hourCycle: "h23", timeZoneName: "short" });

const main = document.getElementById("main");
let view = null;      // the signed-in subject's ProjectView
let timers = [];      // the current page's refreshes, cleared when the page changes
let generation = 0;   // bumped at every page change: an answer for an older page is dropped
let flash = null;     // what an action answered, shown once on the page it redraws

// -- the API ------------------------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// `template` is one of PATHS: its {project} is this tab's Project, its other parameters come from `params`.
async function api(method, template, { params = {}, query, body } = {}) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const values = { project: sessionStorage.getItem(PROJECT_KEY), ...params };
  const path = template.replace(/\{(\w+)\}/g, (_, name) => encodeURIComponent(values[name]));
  const headers = { Authorization: `Bearer ${token}` };
  const init = { method, headers, cache: "no-store", credentials: "omit", referrerPolicy: "no-referrer" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(query === undefined ? path : `${path}?${query}`, init);
  } catch (exc) {
    throw new ApiError(0, "unreachable", "the shell did not answer");
  }
  let answer = null;
  try {
    answer = await response.json();
  } catch (exc) {
    throw new ApiError(response.status, "unreachable", "the answer is not JSON: is this the Qinglong shell?");
  }
  if (!response.ok) throw new ApiError(response.status, answer.code || "error", answer.message || "");
  return answer;
}

function mutationId() {
  return crypto.randomUUID();
}

// -- building the page (text only) --------------------------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function badge(status, label) {
  return el("span", { class: `status s-${status}`, "data-status": status, text: label || status.replace("_", " ") });
}

// An instant as the browser's local time with its zone, e.g. "2026-12-05 07:03:12 GMT+8".
function local(ms) {
  const part = Object.fromEntries(STAMP.formatToParts(new Date(ms)).map((p) => [p.type, p.value]));
  return `${part.year}-${part.month}-${part.day} ${part.hour}:${part.minute}:${part.second} ${part.timeZoneName}`;
}

function when(ms) {
  if (ms === null || ms === undefined) return el("span", { class: "muted", text: "—" });
  const at = new Date(ms);
  const utc = at.toISOString().replace("T", " ").replace("Z", " UTC");
  return el("time", { datetime: at.toISOString(), title: utc, text: local(ms) });
}

// A length of time in words: "850 ms", "4.2 s", "3 min 5 s", "2 h 7 min", "3 d 4 h".
function duration(ms) {
  if (ms < 1000) return `${Math.max(0, Math.round(ms))} ms`;
  const seconds = ms / 1000;
  if (seconds < 60) return `${seconds < 10 ? seconds.toFixed(1) : Math.round(seconds)} s`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) return `${minutes} min ${Math.floor(seconds % 60)} s`;
  const hours = Math.floor(minutes / 60);
  if (hours < 48) return `${hours} h ${minutes % 60} min`;
  return `${Math.floor(hours / 24)} d ${hours % 24} h`;
}

function short(id) {
  return id.slice(0, 8);
}

function table(id, headings, rows, empty) {
  if (rows.length === 0) return el("p", { class: "muted", id, text: empty });
  return el("div", { class: "table" },
    el("table", { id },
      el("thead", {}, el("tr", {}, headings.map((h) => el("th", { scope: "col", text: h })))),
      el("tbody", {}, rows)));
}

function notice(kind, text, id) {
  return el("p", { class: `notice ${kind}`, role: kind === "error" ? "alert" : "status", id, text });
}

function explain(exc) {
  if (!(exc instanceof ApiError)) return String(exc);
  return exc.message && exc.message !== exc.code ? `${exc.code}: ${exc.message}` : exc.code;
}

function show(title, ...children) {
  main.replaceChildren(el("h1", { text: title }), ...children.filter((child) => child !== null));
  document.title = `${title} · Qinglong console`;
}

// The answer an action left for the redrawn page (once), or null.
function flashed() {
  const shown = flash === null ? null : notice("ok", flash, "flash");
  flash = null;
  return shown;
}

function every(ms, fn) {
  timers.push(setInterval(fn, ms));
}

// -- signing in and what cannot be shown --------------------------------------------------------------------

function signinPage(message, { wrongProject = false } = {}) {
  // A token already typed in this tab (the Project was wrong) is kept: leaving the field empty signs in with it.
  const kept = Boolean(sessionStorage.getItem(TOKEN_KEY));
  const token = el("input", { id: "signin-token", type: "password", autocomplete: "off", required: !kept,
    spellcheck: "false", placeholder: kept ? "kept from before: leave empty to use it" : null });
  const project = el("input", { id: "signin-project", type: "text", autocomplete: "off", required: true,
    spellcheck: "false", value: sessionStorage.getItem(PROJECT_KEY) || "" });
  const form = el("form", { class: "signin", id: "signin", novalidate: true },
    el("label", {}, "Project (its name or id)", project),
    el("label", {}, kept ? "Bearer token (the one you typed is kept; type another to replace it)"
      : "Bearer token (kept in this tab only, until you sign out or close it)", token),
    el("button", { class: "primary", type: "submit", id: "signin-submit", text: "Sign in" }));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const typed = token.value.trim() || sessionStorage.getItem(TOKEN_KEY);
    if (!typed || !project.value.trim()) return;
    sessionStorage.setItem(TOKEN_KEY, typed);
    sessionStorage.setItem(PROJECT_KEY, project.value.trim());
    token.value = "";
    start();
  });
  show("Sign in", message || null, form);
  setHeader(false);
  if (wrongProject) {
    project.focus();
    project.select();
  } else if (project.value) token.focus();
  else project.focus();
}

function problemPage(exc) {
  // A page the person can act on: a wrong token, a Project they have no role in, or no shell at all.
  if (exc.status === 401) {
    sessionStorage.removeItem(TOKEN_KEY);
    signinPage(notice("error", "The token was not accepted (unknown, malformed, or its subject is disabled). " +
      "Type it again, or ask whoever gave it to you.", "problem"));
  } else if (exc.status === 404 && exc.code === "not_found") {
    signinPage(notice("error", "No such Project, or this token has no role in it. The token is kept: correct the " +
      "Project and sign in again.", "problem"), { wrongProject: true });
  } else if (exc.code === "unreachable" || exc.status >= 500) {
    setHeader(Boolean(view));
    show("The shell is unreachable",
      notice("error", `The console could not reach the Qinglong shell or its database (${explain(exc)}).`, "problem"),
      el("p", {}, "Nothing was changed. ",
        el("button", { type: "button", id: "retry", onclick: () => route(), text: "Try again" })));
  } else {
    show("Refused", notice("error", explain(exc), "problem"));
  }
}

function setHeader(signedIn) {
  document.getElementById("nav").hidden = !signedIn;
  document.getElementById("signout").hidden = !signedIn;
  document.getElementById("who").textContent = signedIn && view
    ? `${view.subject} (${view.subjectKind}, ${view.role}) in ${view.project}` : "";
  const named = location.hash.split("/")[1];
  const page = { run: "runs", task: "tasks", "new-task": "tasks" }[named] || named || "runs";
  for (const link of document.querySelectorAll("#nav a")) {
    if (link.dataset.page === page) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
}

async function start() {
  if (!sessionStorage.getItem(TOKEN_KEY) || !sessionStorage.getItem(PROJECT_KEY)) return signinPage();
  try {
    view = await api("GET", PATHS.PROJECT);
  } catch (exc) {
    view = null;
    return problemPage(exc);
  }
  if (!location.hash.startsWith("#/")) location.hash = "#/runs";
  route();
}

// -- pages ---------------------------------------------------------------------------------------------------

function route() {
  for (const timer of timers) clearInterval(timer);
  timers = [];
  generation += 1;
  if (!view) return start();
  setHeader(true);
  const [, page, id] = location.hash.split("/");
  const mine = generation;
  const current = () => mine === generation;
  const pages = { runs: runsPage, run: runPage, tasks: tasksPage, task: taskPage, "new-task": taskPage,
    workers: workersPage, notify: notifyPage };
  (pages[page] || runsPage)(current, id ? decodeURIComponent(id) : undefined).catch((exc) => {
    if (current()) problemPage(exc);
  });
  main.focus();
}

async function tasksOf() {
  return (await api("GET", PATHS.TASKS)).tasks;
}

function enqueueForm(tasks, onQueued) {
  // Offered only when the role may start Runs (the API decides each request anyway).
  if (view.runStart === "deny" || tasks.length === 0) return null;
  const select = el("select", { id: "enqueue-task" },
    tasks.filter((t) => t.status === "active").map((t) => el("option", { value: t.taskId, text: t.name })));
  const answer = el("span", { id: "enqueue-answer", role: "status" });
  const form = el("form", { class: "bar", id: "enqueue" }, el("label", {}, "Task", select),
    el("button", { class: "primary", type: "submit", id: "enqueue-submit", text: "Enqueue a Run" }), answer);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const body = { schema: ENQUEUE_SCHEMA, mutationId: mutationId(), taskId: select.value };
      const queued = await api("POST", PATHS.RUNS, { body });
      answer.replaceChildren(badge(queued.status), " ",
        el("a", { href: `#/run/${queued.runId}`, text: `Run ${short(queued.runId)}` }));
      onQueued();
    } catch (exc) {
      answer.replaceChildren(notice("error", explain(exc)));
    }
  });
  return form;
}

async function runsPage(current) {
  const tasks = await tasksOf();
  if (!current()) return;
  const taskFilter = el("select", { id: "filter-task" }, el("option", { value: "", text: "any task" }),
    tasks.map((t) => el("option", { value: t.taskId, text: t.name })));
  const statusFilter = el("select", { id: "filter-status" }, el("option", { value: "", text: "any status" }),
    RUN_STATUSES.map((s) => el("option", { value: s, text: s.replace("_", " ") })));
  const since = el("input", { id: "filter-since", type: "datetime-local" });
  const until = el("input", { id: "filter-until", type: "datetime-local" });
  const auto = el("input", { id: "auto-refresh", type: "checkbox", checked: true });
  const box = el("div", { id: "runs" });
  const pager = el("div", { class: "bar" });
  const cursors = [];  // the cursor of each page before the current one (null: the first)
  let cursor = null;

  async function load() {
    const query = new URLSearchParams();
    if (taskFilter.value) query.set("taskId", taskFilter.value);
    if (statusFilter.value) query.set("status", statusFilter.value);
    if (since.value) query.set("sinceMs", String(new Date(since.value).getTime()));
    if (until.value) query.set("untilMs", String(new Date(until.value).getTime()));
    query.set("limit", "20");
    if (cursor) query.set("cursor", cursor);
    let page;
    try {
      page = await api("GET", PATHS.RUNS, { query });
    } catch (exc) {
      if (!current()) return;
      if (exc.status === 400) return box.replaceChildren(notice("error", explain(exc), "runs-problem"));
      return problemPage(exc);
    }
    if (!current()) return;
    box.replaceChildren(table("runs-table", ["Run", "Task", "Status", "Attempts", "Created", "Started", "Ended",
      "Exit"], page.runs.map((r) => el("tr", { "data-run": r.runId },
      el("td", { class: "mono" }, el("a", { href: `#/run/${r.runId}`, text: short(r.runId) })),
      el("td", { text: r.taskName }),
      el("td", {}, badge(r.status), r.cancelReason ? el("span", { class: "muted", text: ` (${r.cancelReason})` }) : null),
      el("td", { text: String(r.attemptCount) }),
      el("td", { class: "nowrap" }, when(r.createdAtMs)),
      el("td", { class: "nowrap" }, when(r.startedAtMs)),
      el("td", { class: "nowrap" }, when(r.endedAtMs)),
      el("td", { text: r.exitCode === null ? "" : String(r.exitCode) }))), "No Run matches."));
    pager.replaceChildren(
      el("button", { type: "button", id: "page-first", disabled: cursors.length === 0, text: "Newest",
        onclick: () => { cursors.length = 0; cursor = null; load(); } }),
      el("button", { type: "button", id: "page-next", disabled: !page.nextCursor, text: "Older",
        onclick: () => { cursors.push(cursor); cursor = page.nextCursor; load(); } }),
      el("span", { class: "muted", text: `page ${cursors.length + 1}` }));
  }

  const filters = el("form", { class: "bar", id: "filters" },
    el("label", {}, "Task", taskFilter), el("label", {}, "Status", statusFilter),
    el("label", {}, "Created from (your time)", since), el("label", {}, "Created before", until),
    el("button", { type: "submit", text: "Filter" }), el("label", { class: "check" }, auto, "auto-refresh"));
  filters.addEventListener("submit", (event) => {
    event.preventDefault();
    cursors.length = 0;
    cursor = null;
    load();
  });
  for (const field of [taskFilter, statusFilter]) field.addEventListener("change", () => filters.requestSubmit());
  show("Runs", el("p", { class: "muted", text: "Newest first. Times are in your browser's zone; hover for UTC." }),
    enqueueForm(tasks, load), filters, box, pager);
  every(REFRESH_MS, () => { if (auto.checked && cursor === null) load(); });
  await load();
}

// An event's payload as readable facts: words for its keys, local times for instants (…AtMs), durations for
// lengths (…Ms), names for ids where the page knows them, never epoch milliseconds.
function payloadFacts(payload, names, attemptId) {
  let fields;
  try {
    fields = JSON.parse(payload);
  } catch (exc) {
    return [el("span", { class: "fact", text: payload })];
  }
  if (fields === null || typeof fields !== "object") return [el("span", { class: "fact", text: String(fields) })];
  const words = (key) => key.replace(/(AtMs|Ms|Id)$/, (m) => (m === "AtMs" ? " at" : "")).replace(/([A-Z])/g, " $1")
    .toLowerCase().trim();
  const shown = (key, value) => {
    if (value === null || value === undefined) return "—";
    if (key.endsWith("AtMs") && typeof value === "number") return local(value);
    if (key.endsWith("Ms") && typeof value === "number") return duration(value);
    if (key === "workerId") return names.workers.get(attemptId) || `${short(value)}…`;  // known by its Attempt
    if (key === "taskId") return names.tasks.get(value) || `${short(value)}…`;
    if (key.endsWith("Id") && typeof value === "string") return `${short(value)}…`;
    if (key === "secrets" && Array.isArray(value)) {
      return value.map((v) => (typeof v === "object" && v !== null ? `${v.name} v${v.version}` : String(v)))
        .join(", ") || "none";
    }
    return typeof value === "object" ? JSON.stringify(value) : String(value);
  };
  return Object.entries(fields).map(([key, value]) => {
    const label = key === "workerId" ? "worker" : words(key);
    return el("span", { class: "fact", "data-key": key }, el("span", { class: "k", text: label }), " ",
      shown(key, value));
  });
}

function b64bytes(text) {
  const raw = atob(text);
  const bytes = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i += 1) bytes[i] = raw.charCodeAt(i);
  return bytes;
}

// A confirmation in the page (a modal <dialog>): resolves true on `yes`, false on `no`, Escape or closing.
function confirmAction(title, text, yes, no) {
  return new Promise((resolve) => {
    const dialog = el("dialog", { id: "confirm", "aria-labelledby": "confirm-title" },
      el("h2", { id: "confirm-title", text: title }), el("p", { text }),
      el("div", { class: "bar" },
        el("button", { type: "button", class: "danger", id: "confirm-yes", text: yes,
          onclick: () => dialog.close("yes") }),
        el("button", { type: "button", id: "confirm-no", text: no, onclick: () => dialog.close("no") })));
    dialog.addEventListener("close", () => {
      dialog.remove();
      resolve(dialog.returnValue === "yes");
    });
    document.body.append(dialog);
    dialog.showModal();
    dialog.querySelector("#confirm-no").focus();  // the safe choice has the focus
  });
}

async function runPage(current, runId) {
  // What the page can name: tasks by id, and each Attempt's Worker (by the Attempt's id, from its output page).
  const names = { tasks: new Map((await tasksOf()).map((t) => [t.taskId, t.name])), workers: new Map() };
  if (!current()) return;
  const facts = el("dl", { class: "facts", id: "run-facts" });
  const actions = el("div", { class: "bar", id: "run-actions" });
  const events = el("div", { id: "timeline" });
  const output = el("pre", { class: "output", id: "output", tabindex: "0", "aria-label": "Task output" });
  const outputNote = el("p", { class: "muted", id: "output-note" });
  const attemptSelect = el("select", { id: "attempt-select", disabled: true },
    el("option", { value: "", text: "the newest (followed)" }));
  const jump = el("button", { type: "button", id: "output-jump", hidden: true, text: "↓ New output: follow the end" });
  // follow: the Attempt shown (pinned: chosen by the person; null: the newest, switched to when a retry begins)
  const follow = { attempt: null, pinned: null, after: null, offsets: {}, decoders: {} };
  const attempts = new Map();  // attemptNo → what the output route said of it (Worker, times, status)
  let stick = true;  // the box follows the tail: the person has not scrolled up from its end
  let last = null;
  let timeline = null;
  let drawn = null;  // what is on the page: an unchanged Run is not redrawn
  const messages = new Map();  // attemptId → the message its Worker gave with its start failure (the timeline's)

  output.addEventListener("scroll", () => {
    stick = output.scrollHeight - output.scrollTop - output.clientHeight <= TAIL_SLACK_PX;
    if (stick) jump.hidden = true;
  });
  jump.addEventListener("click", () => {
    stick = true;
    jump.hidden = true;
    output.scrollTop = output.scrollHeight;
  });

  function startedAt() {  // the Run's start: its first Attempt's starting ACK
    const started = timeline && timeline.events.find((e) => e.type === "attempt.starting");
    return started ? started.occurredAtMs : null;
  }

  function drawFacts() {
    const run = timeline.run;
    const started = startedAt();
    const shownAttempt = attempts.get(follow.attempt);
    const lasted = started === null ? null : (run.endedAtMs ?? Date.now()) - started;
    facts.replaceChildren(
      el("dt", { text: "Status" }), el("dd", { id: "run-status" }, badge(run.status)),
      el("dt", { text: "Task" }), el("dd", { id: "run-task", text: names.tasks.get(run.taskId) || run.taskId }),
      el("dt", { text: "Created" }), el("dd", { id: "run-created" }, when(run.createdAtMs)),
      el("dt", { text: "Started" }), el("dd", { id: "run-started" }, started === null
        ? el("span", { class: "muted", text: "not yet" }) : when(started)),
      el("dt", { text: "Ended" }), el("dd", { id: "run-ended" }, when(run.endedAtMs)),
      el("dt", { text: "Duration" }), el("dd", { id: "run-duration", text: lasted === null ? "—"
        : duration(lasted) + (run.endedAtMs === null ? " so far" : "") }),
      el("dt", { text: "Worker" }), el("dd", { id: "run-worker", text: shownAttempt
        ? `${shownAttempt.workerName} (Attempt ${shownAttempt.attemptNo})` : "none yet" }),
      el("dt", { text: "Attempts" }), el("dd", { id: "run-attempts", text: String(run.attemptCount) }),
      el("dt", { text: "Cancel" }), el("dd", { text: run.cancelReason
        ? `requested (reason ${run.cancelReason})` : "not requested" }),
      el("dt", { text: "Version" }), el("dd", { text: `${run.version} (${run.eventSequence} events)` }));
  }

  function drawRun(answer) {
    timeline = answer;
    const run = answer.run;
    drawFacts();
    const key = `${run.version}/${names.workers.size}`;
    if (drawn === key) return;
    drawn = key;
    events.replaceChildren(table("timeline-table", ["#", "At", "After", "Event", "Actor", "Details"],
      answer.events.map((e) => el("tr", { "data-event": e.type },
        el("td", { text: String(e.sequence) }), el("td", { class: "nowrap" }, when(e.occurredAtMs)),
        el("td", { class: "nowrap", text: `+${duration(e.occurredAtMs - run.createdAtMs)}` }),
        el("td", { class: "mono", text: e.type }), el("td", { text: e.actorKind }),
        el("td", { class: "details" }, payloadFacts(e.payload, names, e.attemptId)))), "No event yet."),
    ...(answer.truncated ? [el("p", { class: "muted", text: "Only the first 256 events are shown." })] : []));
    const cancel = document.getElementById("cancel-button");
    if (cancel) cancel.hidden = TERMINAL.has(run.status);  // an ended Run has nothing left to cancel
  }

  function appendChunk(chunk) {
    const expected = follow.offsets[chunk.stream] || 0;
    if (chunk.offset > expected) {
      output.append(el("span", { class: "cut", "data-cut": String(chunk.offset - expected),
        text: `[… ${chunk.offset - expected} bytes of ${chunk.stream} cut: the head and the tail are kept …]` }));
    }
    const bytes = b64bytes(chunk.data);
    const skip = Math.max(0, expected - chunk.offset);  // bytes already shown (an overlap)
    if (skip < bytes.length) {
      follow.decoders[chunk.stream] ||= new TextDecoder("utf-8");
      const text = follow.decoders[chunk.stream].decode(bytes.subarray(skip), { stream: true });
      output.append(el("span", { class: chunk.stream, text }));
    }
    follow.offsets[chunk.stream] = Math.max(expected, chunk.offset + bytes.length);
  }

  function showAttempt(number) {  // start over with another Attempt's output, from its first byte
    Object.assign(follow, { attempt: number, after: null, offsets: {}, decoders: {} });
    output.replaceChildren();
    stick = true;
    jump.hidden = true;
  }

  function drawAttempts(count) {
    if (attemptSelect.options.length - 1 === count) return;
    attemptSelect.replaceChildren(el("option", { value: "", text: "the newest (followed)" }),
      ...Array.from({ length: count }, (_, i) => el("option", { value: String(i + 1), text: `Attempt ${i + 1}` })));
    attemptSelect.value = follow.pinned === null ? "" : String(follow.pinned);
    attemptSelect.disabled = count < 2;
  }

  function why(attempt) {  // the code and why, saying so when nothing ran (a start failure)
    const code = attempt.errorCode;
    const message = messages.get(attempt.attemptId) || START_FAILURES[code] || ENDS[code];
    return `${code}${message ? `: ${message}` : ""}${code in START_FAILURES ? " (nothing ran)" : ""}`;
  }

  function note(page) {
    const a = page.attempt;
    if (!a) return "No Attempt yet: the output appears when a Worker starts the task.";
    const ran = a.startedAtMs === null ? "not started"
      : `started ${local(a.startedAtMs)}, ${a.endedAtMs === null ? "running for" : "ran"} ` +
        duration((a.endedAtMs ?? Date.now()) - a.startedAtMs);
    return `Attempt ${a.attemptNo} of ${page.attempts} on ${a.workerName}: ${a.status}, ${ran}` +
      (a.exitCode === null ? "" : `, exit code ${a.exitCode}`) + (a.errorCode ? `, ${why(a)}` : "") +
      (TERMINAL.has(page.runStatus) || a.endedAtMs !== null ? "" : " — following live");
  }

  async function loadOutput() {
    for (let pages = 0; pages < 20; pages += 1) {
      const query = new URLSearchParams();
      if (follow.attempt !== null) query.set("attempt", String(follow.attempt));
      if (follow.after !== null) query.set("after", String(follow.after));
      const page = await api("GET", PATHS.RUN_OUTPUT, { params: { runId }, query });
      if (!current()) return null;
      drawAttempts(page.attempts);
      if (page.attempt) {
        attempts.set(page.attempt.attemptNo, page.attempt);
        names.workers.set(page.attempt.attemptId, page.attempt.workerName);
      }
      if (page.attempt && follow.attempt === null) follow.attempt = page.attempt.attemptNo;
      if (follow.pinned === null && page.attempt && page.attempts > follow.attempt && !page.more &&
          TERMINAL.has(page.attempt.status)) {
        showAttempt(page.attempts);  // a retry began: follow the newest Attempt from its first byte
        continue;
      }
      const atEnd = stick;
      for (const chunk of page.chunks) {
        appendChunk(chunk);
        follow.after = chunk.seq;
      }
      if (page.chunks.length > 0) {
        if (atEnd) output.scrollTop = output.scrollHeight;
        else jump.hidden = false;
      }
      outputNote.textContent = note(page);
      if (!page.more) return page;
    }
    return null;
  }

  attemptSelect.addEventListener("change", async () => {
    follow.pinned = attemptSelect.value === "" ? null : Number(attemptSelect.value);
    showAttempt(follow.pinned);  // null: the newest, found by the next page
    await refresh(true);
  });

  let busy = false;  // one refresh at a time: output is appended in order, once

  async function refresh(again = false) {
    while (busy) {
      if (!again) return;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    busy = true;
    try {
      const answer = await api("GET", PATHS.RUN, { params: { runId } });
      if (!current()) return;
      for (const e of answer.events) {  // before the output's note, which says why with them
        const message = JSON.parse(e.payload).errorMessage;
        if (e.attemptId && typeof message === "string") messages.set(e.attemptId, message);
      }
      await loadOutput();
      if (!current()) return;
      drawRun(answer);
      last = answer.run.status;
      if (TERMINAL.has(last)) {
        for (const timer of timers) clearInterval(timer);
        timers = [];
      }
    } catch (exc) {
      if (current()) problemPage(exc);
    } finally {
      busy = false;
    }
  }

  if (view.runStop !== "deny") {
    const answer = el("span", { id: "cancel-answer", role: "status" });
    const button = el("button", { type: "button", class: "danger", id: "cancel-button", text: "Cancel this Run" });
    button.addEventListener("click", async () => {
      const task = timeline ? names.tasks.get(timeline.run.taskId) || "its task" : "its task";
      const sure = await confirmAction(`Cancel Run ${short(runId)}?`,
        `The Worker stops ${task} (TERM, then KILL after its grace) and the Run ends cancelled. This cannot be undone.`,
        "Cancel the Run", "Keep it");
      if (!sure) {
        answer.replaceChildren(el("span", { class: "muted", id: "cancel-kept", text: "Not cancelled." }));
        return;
      }
      button.disabled = true;
      try {
        const body = { schema: CANCELLATION_SCHEMA, mutationId: mutationId() };
        const result = await api("POST", PATHS.RUN_CANCELLATION, { params: { runId }, body });
        answer.replaceChildren(badge(result.status));
        refresh(true);
      } catch (exc) {
        answer.replaceChildren(exc.code === "approval_required"
          ? badge("approval_required", "approval required: an agent's cancel needs a human")
          : notice("error", explain(exc)));
        button.disabled = false;
      }
    });
    actions.append(button, answer);
  }
  show(`Run ${short(runId)}`, el("p", {}, el("a", { href: "#/runs", text: "← all Runs" })), facts, actions,
    el("h2", { text: "Output" }), el("div", { class: "bar" }, el("label", {}, "Attempt", attemptSelect), jump),
    outputNote, output, el("h2", { text: "Timeline" }),
    el("p", { class: "muted", text: `Times in your zone (${ZONE}); "After" counts from the Run's creation.` }),
    events);
  await refresh();
  if (current() && last !== null && !TERMINAL.has(last)) every(FOLLOW_MS, refresh);
}

// Run now: a Run of the task's current revision (run.start), answered with a link to it.
async function runNow(task, answer) {
  try {
    const body = { schema: ENQUEUE_SCHEMA, mutationId: mutationId(), taskId: task.taskId };
    const queued = await api("POST", PATHS.RUNS, { body });
    answer.replaceChildren(badge(queued.status), " ",
      el("a", { href: `#/run/${queued.runId}`, class: "run-link", text: `Run ${short(queued.runId)}` }));
  } catch (exc) {
    answer.replaceChildren(notice("error", explain(exc)));
  }
}

// Enable or disable (task.write): the answer says whether it changed; `done` redraws the page.
async function setActive(task, active, answer, done) {
  try {
    const result = await api("PUT", PATHS.TASK_STATUS, { params: { task: task.name },
      body: { schema: TASK_SCHEMA, active } });
    flash = `${result.name}: ${result.status}${result.changed ? "" : " (it already was)"}`;
    done();
  } catch (exc) {
    answer.replaceChildren(notice("error", explain(exc)));
  }
}

// A task's buttons as the role allows them: run now (active tasks, run.start), disable or enable (task.write).
function taskActions(task, done) {
  const answer = el("span", { class: "task-answer", role: "status" });
  const buttons = [];
  if (view.runStart !== "deny" && task.status === "active" && task.revisionId) {
    buttons.push(el("button", { type: "button", class: "primary run-now", "data-task": task.name, text: "Run now",
      onclick: () => runNow(task, answer) }));
  }
  if (view.taskWrite === "allow") {
    const active = task.status === "active";
    buttons.push(el("button", { type: "button", class: "toggle-task", "data-task": task.name,
      text: active ? "Disable" : "Enable", onclick: () => setActive(task, !active, answer, done) }));
  }
  return el("div", { class: "actions" }, buttons, answer);
}

function scheduleText(schedule) {
  return schedule ? `${schedule.cron} (${schedule.timezone}, overlap ${schedule.overlap})` : "none";
}

async function tasksPage(current) {
  const [tasks, recent] = await Promise.all([tasksOf(), api("GET", PATHS.RUNS, { query: "limit=100" })]);
  if (!current()) return;
  const byTask = new Map();
  for (const run of recent.runs) {
    if (!byTask.has(run.taskId)) byTask.set(run.taskId, []);
    if (byTask.get(run.taskId).length < 3) byTask.get(run.taskId).push(run);
  }
  const plan = (t) => t.argv === null ? "—"
    : `${t.argv.join(" ")}  ·  pool ${t.pool}` + (t.timeoutMs ? `  ·  timeout ${duration(t.timeoutMs)}` : "") +
      (t.maxAttempts ? `  ·  ${t.maxAttempts} attempts at most` : "");
  show("Tasks",
    el("p", { class: "muted", text: "Each task's current revision. The last Runs are among the Project's newest 100." }),
    flashed(),
    view.taskWrite === "allow" ? el("p", {}, el("a", { href: "#/new-task", id: "new-task", class: "button",
      text: "New task" })) : null,
    table("tasks-table", ["Task", "Status", "Revision", "Plan", "Schedule", "Next fires", "Last Runs", "Actions"],
      tasks.map((t) => el("tr", { "data-task": t.name },
        el("td", {}, el("a", { href: `#/task/${encodeURIComponent(t.name)}`, text: t.name })),
        el("td", {}, badge(t.status)),
        el("td", { class: "mono", text: t.revisionId ? short(t.revisionId) + (t.signed ? " signed" : "") : "—" }),
        el("td", { class: "mono", text: plan(t) }),
        el("td", { text: scheduleText(t.schedule) }),
        el("td", { class: "nowrap" }, t.schedule && t.schedule.nextFiresMs.length
          ? t.schedule.nextFiresMs.map((ms) => el("div", {}, when(ms))) : "—"),
        el("td", {}, (byTask.get(t.taskId) || []).map((r) => el("div", {},
          el("a", { href: `#/run/${r.runId}`, class: "mono", text: short(r.runId) }), " ", badge(r.status)))),
        el("td", {}, taskActions(t, () => route())))),
      "This Project has no task yet."));
}

// -- a task: a new revision, its schedule --------------------------------------------------------------------

const lines = (text) => text.split("\n").map((line) => line.trim()).filter((line) => line !== "");

// The plan the form describes, over the current plan: what the form does not show (secrets, bundle, cwd, user,
// group, …) is kept as it is. A field left empty is absent (no timeout, one attempt, the default pool).
function formPlan(fields, base) {
  const plan = { ...(base || {}) };
  for (const key of ["argv", "env", "pool", "timeoutMs", "maxAttempts", "retryBackoffMs"]) delete plan[key];
  plan.argv = fields.argv.value.split("\n").filter((arg, i, all) => arg !== "" || i < all.length - 1);
  while (plan.argv.length && plan.argv[plan.argv.length - 1] === "") plan.argv.pop();
  const env = lines(fields.env.value);
  if (env.length) {
    plan.env = {};
    for (const pair of env) {
      const at = pair.indexOf("=");
      if (at < 1) throw new Error(`environment: "${pair}" is not NAME=VALUE`);
      plan.env[pair.slice(0, at)] = pair.slice(at + 1);
    }
  }
  if (fields.pool.value.trim()) plan.pool = fields.pool.value.trim();
  const number = (field, scale, what) => {
    if (!field.value.trim()) return undefined;
    const value = Number(field.value) * scale;
    if (!Number.isInteger(value) || value < 0) throw new Error(`${what}: a whole number is needed`);
    return value;
  };
  const timeout = number(fields.timeout, 1000, "timeout");
  if (timeout !== undefined) plan.timeoutMs = timeout;
  const attemptsAtMost = number(fields.attempts, 1, "attempts");
  if (attemptsAtMost !== undefined) plan.maxAttempts = attemptsAtMost;
  const backoff = number(fields.backoff, 1000, "retry wait");
  if (backoff !== undefined) plan.retryBackoffMs = backoff;
  return plan;
}

function revisionForm(task, onMade) {
  const plan = task ? task.plan || {} : {};
  const fields = {
    name: el("input", { id: "task-name", type: "text", required: true, autocomplete: "off", spellcheck: "false",
      pattern: "[A-Za-z0-9][A-Za-z0-9._-]{0,127}" }),
    argv: el("textarea", { id: "task-argv", rows: "4", required: true, spellcheck: "false" }),
    env: el("textarea", { id: "task-env", rows: "3", spellcheck: "false" }),
    pool: el("input", { id: "task-pool", type: "text", placeholder: "default", spellcheck: "false" }),
    timeout: el("input", { id: "task-timeout", type: "number", min: "1", step: "1", placeholder: "none" }),
    attempts: el("input", { id: "task-attempts", type: "number", min: "1", max: "100", step: "1", placeholder: "1" }),
    backoff: el("input", { id: "task-backoff", type: "number", min: "0", step: "1", placeholder: "0" }),
  };
  fields.argv.value = (plan.argv || []).join("\n");
  fields.env.value = Object.entries(plan.env || {}).map(([k, v]) => `${k}=${v}`).join("\n");
  fields.pool.value = plan.pool || "";
  fields.timeout.value = plan.timeoutMs ? String(plan.timeoutMs / 1000) : "";
  fields.attempts.value = plan.maxAttempts ? String(plan.maxAttempts) : "";
  fields.backoff.value = plan.retryBackoffMs ? String(plan.retryBackoffMs / 1000) : "";
  const keptKeys = Object.keys(plan).filter((k) =>
    !["argv", "env", "pool", "timeoutMs", "maxAttempts", "retryBackoffMs"].includes(k));
  const unsigned = el("input", { id: "task-unsigned-ok", type: "checkbox" });
  const answer = el("div", { id: "revision-answer", role: "status" });
  const form = el("form", { id: "revision-form", class: "stack", novalidate: true },
    task ? null : el("label", {}, "Name (letters, digits, . _ -; unique in the Project)", fields.name),
    el("label", {}, "Command: one argument per line (the first is the program)", fields.argv),
    el("label", {}, "Environment: NAME=VALUE, one per line", fields.env),
    el("div", { class: "bar" },
      el("label", {}, "Pool", fields.pool),
      el("label", {}, "Timeout (s)", fields.timeout),
      el("label", {}, "Attempts at most (retries + 1)", fields.attempts),
      el("label", {}, "Wait before a retry (s)", fields.backoff)),
    keptKeys.length ? el("p", { class: "muted", id: "task-kept",
      text: `Kept from the current revision as they are: ${keptKeys.join(", ")}.` }) : null,
    el("p", { class: "notice", id: "signing-note", text: "A revision made here is unsigned. A Worker that requires " +
      "signed plans (require_signed_plans, on unless its worker.toml says otherwise) refuses to start it " +
      "(plan.unsigned). Signed revisions come from the CLI: qinglong task revise --sign KEY (or task create --sign)." }),
    task && task.signed ? el("label", { class: "check" }, unsigned,
      "The current revision is signed: replace it with an unsigned one anyway") : null,
    el("button", { class: "primary", type: "submit", id: "revision-submit",
      text: task ? "Save a new revision" : "Create the task" }),
    answer);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const name = task ? task.name : fields.name.value.trim();
    let body;
    try {
      if (!task && !fields.name.checkValidity()) throw new Error("name: letters, digits, . _ - (128 at most)");
      if (task && task.signed && !unsigned.checked) {
        throw new Error("the current revision is signed: tick the box to replace it with an unsigned one, " +
          "or make a signed revision with the CLI");
      }
      body = { schema: TASK_SCHEMA, mutationId: mutationId(), plan: formPlan(fields, task ? task.plan : null) };
    } catch (exc) {
      answer.replaceChildren(notice("error", exc.message));
      return;
    }
    try {
      const made = await api("PUT", PATHS.TASK, { params: { task: name }, body });
      flash = `${made.name}: ${made.status.replace("_", " ")}, revision ${short(made.revisionId)} ` +
        `(${made.signed ? "signed" : "unsigned"})`;
      onMade(made);
    } catch (exc) {
      answer.replaceChildren(notice("error", explain(exc)));
    }
  });
  return form;
}

function scheduleForm(task, onSaved) {
  const cron = el("input", { id: "schedule-cron", type: "text", spellcheck: "false", autocomplete: "off",
    placeholder: "*/5 * * * *", value: task.schedule ? task.schedule.cron : "" });
  const zone = el("input", { id: "schedule-zone", type: "text", spellcheck: "false", autocomplete: "off",
    value: task.schedule ? task.schedule.timezone : ZONE });
  const overlap = el("select", { id: "schedule-overlap" },
    el("option", { value: "skip", text: "skip a fire time while a Run is live" }),
    el("option", { value: "allow", text: "allow overlapping Runs" }));
  overlap.value = task.schedule ? task.schedule.overlap : "skip";
  const preview = el("div", { id: "schedule-preview", "aria-live": "polite" });
  const answer = el("div", { id: "schedule-answer", role: "status" });
  let timer = null;
  let asked = 0;  // only the answer to the latest question is shown

  async function update() {
    const expression = cron.value.trim();
    if (!expression) {
      preview.replaceChildren(el("p", { class: "muted", text: "No expression: saving clears the schedule." }));
      return;
    }
    const mine = ++asked;
    const query = new URLSearchParams({ cron: expression, timezone: zone.value.trim(), count: "5" });
    try {
      const shown = await api("GET", PATHS.SCHEDULE_PREVIEW, { query });
      if (mine !== asked) return;
      preview.replaceChildren(el("p", { class: "muted", text: `Next fire times (${shown.timezone} on the ` +
        `schedule's clock, shown in your zone ${ZONE}):` }),
        el("ol", { id: "schedule-fires" }, shown.fires.map((f) => el("li", {}, when(f.atMs),
          el("span", { class: "muted", text: ` — ${f.local} in ${shown.timezone}` })))));
    } catch (exc) {
      if (mine !== asked) return;
      preview.replaceChildren(notice("error", explain(exc), "schedule-problem"));
    }
  }
  const later = () => {
    clearTimeout(timer);
    timer = setTimeout(update, PREVIEW_DELAY_MS);
  };
  cron.addEventListener("input", later);
  zone.addEventListener("input", later);

  async function save(expression) {
    const body = expression === null ? { schema: TASK_SCHEMA, cron: null }
      : { schema: TASK_SCHEMA, cron: expression, timezone: zone.value.trim(), overlap: overlap.value };
    try {
      const saved = await api("PUT", PATHS.TASK_SCHEDULE, { params: { task: task.name }, body });
      flash = saved.status === "set" ? `schedule set: next fire ${local(saved.nextFireAtMs)}`
        : `schedule ${saved.status}`;
      onSaved(saved);
    } catch (exc) {
      answer.replaceChildren(notice("error", explain(exc)));
    }
  }
  const form = el("form", { id: "schedule-form", class: "stack", novalidate: true },
    el("p", { class: "muted", text: "Five fields (minute hour day-of-month month day-of-week) or six with a second " +
      "first, e.g. */10 * * * * * for every ten seconds; @daily and the like too." }),
    el("div", { class: "bar" }, el("label", {}, "Cron expression", cron), el("label", {}, "Time zone (IANA)", zone),
      el("label", {}, "Overlap", overlap)),
    preview,
    el("div", { class: "bar" },
      el("button", { class: "primary", type: "submit", id: "schedule-save", text: "Save the schedule" }),
      task.schedule ? el("button", { type: "button", id: "schedule-clear", text: "Clear the schedule",
        onclick: () => save(null) }) : null),
    answer);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    save(cron.value.trim() || null);
  });
  update();
  return form;
}

async function taskPage(current, name) {
  const tasks = await tasksOf();
  if (!current()) return;
  const task = name === undefined ? null : tasks.find((t) => t.name === name);
  if (name !== undefined && !task) {
    show("No such task", notice("error", `This Project has no task ${name}.`, "problem"),
      el("p", {}, el("a", { href: "#/tasks", text: "← all tasks" })));
    return;
  }
  const back = el("p", {}, el("a", { href: "#/tasks", text: "← all tasks" }));
  const mayWrite = view.taskWrite === "allow";
  const cannot = el("p", { class: "notice", id: "task-readonly", text: `Your role (${view.role}) cannot change ` +
    "tasks: owners and admins can." });
  if (!task) {
    if (!mayWrite) return show("New task", back, cannot);
    show("New task", back, revisionForm(null, (made) => { location.hash = `#/task/${encodeURIComponent(made.name)}`; }));
    return;
  }
  const redraw = () => { if (current()) route(); };
  const plan = task.plan || {};
  show(`Task ${task.name}`, back, flashed(),
    el("dl", { class: "facts", id: "task-facts" },
      el("dt", { text: "Status" }), el("dd", { id: "task-status" }, badge(task.status)),
      el("dt", { text: "Revision" }), el("dd", { id: "task-revision", text: task.revisionId
        ? `${short(task.revisionId)} (${task.signed ? "signed" : "unsigned"})` : "—" }),
      el("dt", { text: "Command" }), el("dd", { class: "mono", id: "task-command", text: (task.argv || [])
        .map((arg) => (/^[\w@%+=:,./-]+$/.test(arg) ? arg : JSON.stringify(arg))).join(" ") || "—" }),
      el("dt", { text: "Pool" }), el("dd", { text: task.pool }),
      el("dt", { text: "Timeout" }), el("dd", { text: plan.timeoutMs ? duration(plan.timeoutMs) : "none" }),
      el("dt", { text: "Attempts at most" }), el("dd", { text: String(plan.maxAttempts || 1) }),
      el("dt", { text: "Schedule" }), el("dd", { id: "task-schedule", text: scheduleText(task.schedule) })),
    taskActions(task, redraw),
    mayWrite ? null : cannot,
    mayWrite ? el("h2", { text: "Schedule" }) : null,
    mayWrite ? scheduleForm(task, redraw) : null,
    mayWrite ? el("h2", { text: "A new revision" }) : null,
    mayWrite ? revisionForm(task, redraw) : null);
}

async function workersPage(current) {
  const workers = (await api("GET", PATHS.WORKERS)).workers;
  if (!current()) return;
  show("Workers",
    el("p", { class: "muted", text: "The Workers of the pools this Project's tasks use. Online: a live session." }),
    table("workers-table", ["Worker", "Pool", "Generation", "State", "Enrolment", "This Project's Attempts",
      "Last contact"], workers.map((w) => el("tr", { "data-worker": w.name },
      el("td", { text: w.name }), el("td", { class: "mono", text: w.pool }),
      el("td", { text: String(w.generation) }),
      el("td", {}, badge(w.online ? "online" : "offline")), el("td", {}, badge(w.status)),
      el("td", { text: String(w.activeAttempts) }),
      el("td", { class: "nowrap" }, w.lastContactAtMs === null ? el("span", { class: "muted", text: "never" })
        : when(w.lastContactAtMs)))), "No Worker serves this Project's pools."));
}

// -- notifications (read only: rules are managed with `qinglong notify rule …`) ------------------------------

async function notifyPage(current) {
  async function load() {
    const [rules, history] = await Promise.all([api("GET", PATHS.NOTIFY_RULES),
      api("GET", PATHS.NOTIFY_DELIVERIES, { query: "limit=50" })]);
    if (!current()) return;
    show("Notifications",
      el("p", { class: "muted", text: "Rules name a Project secret, never its value. Each notification is delivered "
        + "at least once; its id is the idempotency key a receiver sees." }),
      el("h2", { text: "Rules" }),
      table("notify-rules", ["Rule", "Events", "Channel", "Where", "Secret", "Pending"],
        rules.rules.map((r) => el("tr", { "data-rule": r.name },
          el("td", { text: r.name }), el("td", { class: "mono", text: r.events.join(", ") }),
          el("td", { text: r.channel }), el("td", { class: "mono", text: r.url || "WeCom robot" }),
          el("td", { class: "mono", text: r.secretName }), el("td", { text: String(r.pending) }))),
        "No rule: `qinglong notify rule add` makes one."),
      el("h2", { text: "Latest notifications" }),
      table("notify-history", ["Id", "Rule", "Event", "State", "Attempts", "Last attempt", "Created", "Next attempt"],
        history.notifications.map((n) => {
          const last = n.deliveries[n.deliveries.length - 1];
          const outcome = last ? [last.statusCode, last.error].filter((x) => x !== undefined).join(" ") : "";
          return el("tr", { "data-notification": n.id },
            el("td", { class: "mono", text: short(n.id) }), el("td", { text: n.rule }),
            el("td", { class: "mono", text: n.kind }), el("td", {}, badge(n.state)),
            el("td", { text: String(n.attempts) }), el("td", { class: "mono", text: outcome }),
            el("td", { class: "nowrap" }, when(n.createdAtMs)),
            el("td", { class: "nowrap" }, n.nextAttemptAtMs === undefined ? "" : when(n.nextAttemptAtMs)));
        }), "No notification yet."));
  }
  await load();
  every(REFRESH_MS, () => load().catch((exc) => { if (current()) problemPage(exc); }));
}

// -- start ---------------------------------------------------------------------------------------------------

document.getElementById("signout").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  view = null;
  for (const timer of timers) clearInterval(timer);
  timers = [];
  location.hash = "";
  signinPage(notice("ok", "Signed out: the token is gone from this tab."));
});
window.addEventListener("hashchange", () => { if (view && location.hash.startsWith("#/")) route(); });
document.querySelector(".skip").addEventListener("click", (event) => {  // to the content, the page unchanged
  event.preventDefault();
  main.focus();
});
start();

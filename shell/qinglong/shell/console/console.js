// The web console: a client of the user API, like the `qinglong` CLI (docs/decisions/0010-web-console.md).
// Touches this tab's session storage (the bearer token and the Project, typed once) and the user API of its own
// origin (fetch with `Authorization: Bearer …`; never a token in a URL or a cookie). It decides nothing: what the
// role allows comes from the Project's view (PATHS.PROJECT), and every action is the API's to accept or refuse.
// Views (the URL fragment): #/runs (filters, pages, auto-refresh, enqueue), #/run/<id> (status, timeline, output
// followed live, cancel), #/tasks (plans, schedules, last Runs), #/workers (online or offline), #/notify (rules and
// the latest notifications with their attempts, read only). Every value from
// the API reaches the page as text (textContent), never as markup. The paths, schemas and statuses of the wire come
// from wire.js, which the shell makes from qinglong.wire.

import { CANCELLATION_SCHEMA, ENDED_RUN_STATUSES, ENQUEUE_SCHEMA, PATHS, RUN_STATUSES } from "./wire.js";

const TOKEN_KEY = "qinglong.token";
const PROJECT_KEY = "qinglong.project";
const TERMINAL = new Set(ENDED_RUN_STATUSES);
const REFRESH_MS = 5000;
const FOLLOW_MS = 1000;

const main = document.getElementById("main");
let view = null;      // the signed-in subject's ProjectView
let timers = [];      // the current page's refreshes, cleared when the page changes
let generation = 0;   // bumped at every page change: an answer for an older page is dropped

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

function when(ms) {
  if (ms === null || ms === undefined) return el("span", { class: "muted", text: "—" });
  const at = new Date(ms);
  const utc = at.toISOString().replace("T", " ").replace("Z", " UTC");
  return el("time", { datetime: at.toISOString(), title: utc, text: at.toLocaleString() });
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

function every(ms, fn) {
  timers.push(setInterval(fn, ms));
}

// -- signing in and what cannot be shown --------------------------------------------------------------------

function signinPage(message) {
  const token = el("input", { id: "signin-token", type: "password", autocomplete: "off", required: true,
    spellcheck: "false" });
  const project = el("input", { id: "signin-project", type: "text", autocomplete: "off", required: true,
    spellcheck: "false", value: sessionStorage.getItem(PROJECT_KEY) || "" });
  const form = el("form", { class: "signin", id: "signin", novalidate: true },
    el("label", {}, "Project (its name or id)", project),
    el("label", {}, "Bearer token (kept in this tab only, until you sign out or close it)", token),
    el("button", { class: "primary", type: "submit", id: "signin-submit", text: "Sign in" }));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    if (!token.value.trim() || !project.value.trim()) return;
    sessionStorage.setItem(TOKEN_KEY, token.value.trim());
    sessionStorage.setItem(PROJECT_KEY, project.value.trim());
    token.value = "";
    start();
  });
  show("Sign in", message || null, form);
  setHeader(false);
  project.value ? token.focus() : project.focus();
}

function problemPage(exc) {
  // A page the person can act on: a wrong token, a Project they have no role in, or no shell at all.
  if (exc.status === 401) {
    sessionStorage.removeItem(TOKEN_KEY);
    signinPage(notice("error", "The token was not accepted (unknown, malformed, or its subject is disabled). " +
      "Type it again, or ask whoever gave it to you.", "problem"));
  } else if (exc.status === 404 && exc.code === "not_found") {
    sessionStorage.removeItem(TOKEN_KEY);
    signinPage(notice("error", "No such Project, or this token has no role in it.", "problem"));
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
  const page = named === "run" ? "runs" : named || "runs";
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
  const pages = { runs: runsPage, run: runPage, tasks: tasksPage, workers: workersPage, notify: notifyPage };
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

function payloadText(payload) {
  try {
    return Object.entries(JSON.parse(payload)).map(([k, v]) => `${k}=${typeof v === "object" ? JSON.stringify(v) : v}`)
      .join(", ");
  } catch (exc) {
    return payload;
  }
}

function b64bytes(text) {
  const raw = atob(text);
  const bytes = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i += 1) bytes[i] = raw.charCodeAt(i);
  return bytes;
}

async function runPage(current, runId) {
  const names = new Map((await tasksOf()).map((t) => [t.taskId, t.name]));
  if (!current()) return;
  const facts = el("dl", { class: "facts", id: "run-facts" });
  const actions = el("div", { class: "bar", id: "run-actions" });
  const events = el("div", { id: "timeline" });
  const output = el("pre", { class: "output", id: "output", tabindex: "0", "aria-label": "Task output" });
  const outputNote = el("p", { class: "muted", id: "output-note" });
  const follow = { attempt: null, after: null, offsets: {}, decoders: {} };
  let last = null;
  let drawn = null;  // the version on the page: an unchanged Run is not redrawn

  function drawRun(timeline) {
    const run = timeline.run;
    if (drawn === run.version) return;
    drawn = run.version;
    facts.replaceChildren(
      el("dt", { text: "Status" }), el("dd", { id: "run-status" }, badge(run.status)),
      el("dt", { text: "Task" }), el("dd", { id: "run-task", text: names.get(run.taskId) || run.taskId }),
      el("dt", { text: "Attempts" }), el("dd", { id: "run-attempts", text: String(run.attemptCount) }),
      el("dt", { text: "Created" }), el("dd", {}, when(run.createdAtMs)),
      el("dt", { text: "Ended" }), el("dd", {}, when(run.endedAtMs)),
      el("dt", { text: "Cancel" }), el("dd", { text: run.cancelReason
        ? `requested (reason ${run.cancelReason})` : "not requested" }),
      el("dt", { text: "Version" }), el("dd", { text: `${run.version} (${run.eventSequence} events)` }));
    events.replaceChildren(table("timeline-table", ["#", "At", "Event", "Actor", "Detail"],
      timeline.events.map((e) => el("tr", {},
        el("td", { text: String(e.sequence) }), el("td", { class: "nowrap" }, when(e.occurredAtMs)),
        el("td", { class: "mono", text: e.type }), el("td", { text: e.actorKind }),
        el("td", { class: "mono", text: payloadText(e.payload) }))), "No event yet."),
    ...(timeline.truncated ? [el("p", { class: "muted", text: "Only the first 256 events are shown." })] : []));
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

  async function loadOutput() {
    for (let pages = 0; pages < 20; pages += 1) {
      const query = new URLSearchParams();
      if (follow.attempt !== null) query.set("attempt", String(follow.attempt));
      if (follow.after !== null) query.set("after", String(follow.after));
      const page = await api("GET", PATHS.RUN_OUTPUT, { params: { runId }, query });
      if (!current()) return null;
      if (page.attempt && follow.attempt === null) follow.attempt = page.attempt.attemptNo;
      if (page.attempt && page.attempts > follow.attempt && !page.more && TERMINAL.has(page.attempt.status)) {
        // A retry began: follow the newest Attempt from its first byte.
        Object.assign(follow, { attempt: page.attempts, after: null, offsets: {}, decoders: {} });
        output.replaceChildren();
        continue;
      }
      for (const chunk of page.chunks) {
        appendChunk(chunk);
        follow.after = chunk.seq;
      }
      outputNote.textContent = page.attempt
        ? `Attempt ${page.attempt.attemptNo} of ${page.attempts}: ${page.attempt.status}` +
          (page.attempt.exitCode === null ? "" : `, exit code ${page.attempt.exitCode}`) +
          (page.attempt.errorCode ? `, ${page.attempt.errorCode}` : "") +
          (TERMINAL.has(page.runStatus) ? "" : " — following live")
        : "No Attempt yet: the output appears when a Worker starts the task.";
      if (!page.more) return page;
    }
    return null;
  }

  let busy = false;  // one refresh at a time: output is appended in order, once

  async function refresh() {
    if (busy) return;
    busy = true;
    try {
      const timeline = await api("GET", PATHS.RUN, { params: { runId } });
      if (!current()) return;
      drawRun(timeline);
      await loadOutput();
      last = timeline.run.status;
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
      button.disabled = true;
      try {
        const body = { schema: CANCELLATION_SCHEMA, mutationId: mutationId() };
        const result = await api("POST", PATHS.RUN_CANCELLATION, { params: { runId }, body });
        answer.replaceChildren(badge(result.status));
        refresh();
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
    el("h2", { text: "Output" }), outputNote, output, el("h2", { text: "Timeline" }), events);
  await refresh();
  if (current() && last !== null && !TERMINAL.has(last)) every(FOLLOW_MS, refresh);
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
    : `${t.argv.join(" ")}  ·  pool ${t.pool}` + (t.timeoutMs ? `  ·  timeout ${t.timeoutMs / 1000} s` : "") +
      (t.maxAttempts ? `  ·  ${t.maxAttempts} attempts at most` : "");
  show("Tasks",
    el("p", { class: "muted", text: "Each task's current revision. The last Runs are among the Project's newest 100." }),
    enqueueForm(tasks, () => {}),
    table("tasks-table", ["Task", "Status", "Revision", "Plan", "Schedule", "Next fires", "Last Runs"],
      tasks.map((t) => el("tr", { "data-task": t.name },
        el("td", { text: t.name }), el("td", {}, badge(t.status)),
        el("td", { class: "mono", text: t.revisionId ? short(t.revisionId) : "—" }),
        el("td", { class: "mono", text: plan(t) }),
        el("td", { text: t.schedule ? `${t.schedule.cron} (${t.schedule.timezone}, overlap ${t.schedule.overlap})`
          : "none" }),
        el("td", { class: "nowrap" }, t.schedule && t.schedule.nextFiresMs.length
          ? t.schedule.nextFiresMs.map((ms) => el("div", {}, when(ms))) : "—"),
        el("td", {}, (byTask.get(t.taskId) || []).map((r) => el("div", {},
          el("a", { href: `#/run/${r.runId}`, class: "mono", text: short(r.runId) }), " ", badge(r.status)))))),
      "This Project has no task yet."));
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

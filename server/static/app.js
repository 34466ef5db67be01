// Our research page. Plain script, no build step. Everything a model or a web page wrote
// (plans, findings, tool output, the report) is untrusted: it is shown with textContent, and
// markdown a model wrote (the report, findings, previews, the evaluation's summary) goes through
// marked and then DOMPurify before it touches the DOM. The server's Content-Security-Policy
// allows only this origin's scripts as a second line.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { run: null, after: null, feed: null, report: "", sources: new Map(), lastStatus: null,
  retryTimer: null, previews: new Map(), offlineNotice: null, locale: null, questions: new Map(), audio: null,
  resultShown: false, reveal: false, metricsGrade: null, may: { decide: true, cancel: true, fork: true } };
const RUN_LIST_SECONDS = 5;
// How a closed workflow ended (Temporal's status), in a reader's words.
const ENDED = { completed: "finished", failed: "failed", canceled: "cancelled", terminated: "terminated",
  timed_out: "timed out", continued_as_new: "continued as a new run" };
// Where a running run is, in a reader's words (the workflow's phases: workflows/contracts/status.py Phase).
const PHASE_WORDS = { starting: "starting", coordinating: "reading the question",
  background_investigation: "searching for background", planning: "writing the plan",
  awaiting_clarification: "waiting for an answer to its question", awaiting_review: "waiting for a review of its plan",
  awaiting_budget: "paused at its budget, waiting for a decision", researching: "researching",
  reporting: "writing the report", completed: "finishing", failed: "failing" };
// A completed run can still have ended without a report (its result's outcome says so).
const OUTCOME = { report: "finished, with a research report",
  direct_reply: "finished, with a direct reply (no research was done)",
  failed: "failed", cancelled: "cancelled" };

function headers(json) {
  const h = json ? { "Content-Type": "application/json" } : {};
  const token = sessionStorage.getItem("deerflow-token");
  if (token) h.Authorization = `Bearer ${token}`;
  return h;
}

// GET without a body, POST with one; a 401 asks for the token. The response is the caller's.
async function request(path, body) {
  const response = await fetch(path, body === undefined ? { headers: headers(false) }
    : { method: "POST", headers: headers(true), body: JSON.stringify(body) });
  if (response.status === 401) {
    $("token-form").hidden = false;
    throw Object.assign(new Error("this server needs its token"), { status: 401 });
  }
  return response;
}

// The server's reason for a refusal (its JSON "detail"), else the status line.
async function refusal(response) {
  let detail = null;
  try {
    detail = (await response.json()).detail;
  } catch {
    // not JSON: the status line says enough
  }
  const error = new Error(detail || `${response.status} ${response.statusText}`);
  error.status = response.status;
  return error;
}

// What a decision's button says when the server refused it, or (504) when no worker took it in
// time: then it was sent, and may still reach the run, so "not sent" would be wrong.
function decisionProblem(error) {
  return error.status === 504 ? `Sent, not taken yet: ${error.message}` : `Not sent: ${error.message}`;
}

async function api(path, body) {
  const response = await request(path, body);
  if (!response.ok) throw await refusal(response);
  return response.json();
}

function item(tag, text, className) {
  const element = document.createElement(tag);
  element.textContent = text;
  if (className) element.className = className;
  return element;
}

// ------------------------------------------------------------------ runs list and new runs

// The list shows each run by its question (its id for runs started without one on record), newest
// first, a page at a time (More runs), filtered by the form above it (GET /api/runs?…: the server's
// visibility index does the filtering and paging). It refreshes itself while the page is in view, so
// a run started elsewhere or one that ended shows; a refresh reloads as many runs as are shown.
const RUN_PAGE = 50;
const list = { filter: new URLSearchParams(), shown: 0, next: null, queue: Promise.resolve(), pending: null };

function listFilter() {
  const filter = new URLSearchParams();
  const words = $("filter-question").value.trim();
  const starter = $("filter-started-by").value.trim();
  if (words) filter.set("question", words);
  if (starter) filter.set("started_by", starter);
  for (const choice of [$("filter-state").value, $("filter-age").value].filter(Boolean)) {
    const [key, value] = choice.split("=");
    filter.set(key, value);
  }
  return filter;
}

function listPath(size, page) {
  const query = new URLSearchParams(list.filter);
  query.set("page_size", String(size));
  if (page) query.set("page", page);
  return `/api/runs?${query}`;
}

// Loads of the list (a refresh, a filter, More runs) run one after another, so none renders over a
// newer one: a refresh in flight when a filter is sent would otherwise put the old filter's runs
// back, and a More runs clicked meanwhile would be lost. A refresh asked for while one waits to
// start is that one.
function queued(load) {
  const run = list.queue.catch(() => {}).then(load);
  list.queue = run;
  return run;
}

function loadRuns() {
  if (!list.pending) list.pending = queued(() => { list.pending = null; return reloadRuns(); });
  return list.pending;
}

async function reloadRuns() {
  const size = Math.min(Math.max(RUN_PAGE, list.shown), 500);
  const { runs, next_page: next } = await api(listPath(size));
  $("runs").replaceChildren(...runs.map(runItem));
  $("runs").dataset.filter = list.filter.toString();  // which filter the list shows
  showPaging(runs.length, next);
  if (state.questions.has(state.run)) $("run-title").textContent = state.questions.get(state.run);
}

function moreRuns() {
  return queued(async () => {
    if (!list.next) return;
    const { runs, next_page: next } = await api(listPath(RUN_PAGE, list.next));
    $("runs").append(...runs.map(runItem));
    showPaging(list.shown + runs.length, next);
  });
}

function showPaging(shown, next) {
  list.shown = shown;
  list.next = next;
  $("more-runs").hidden = !next;
  $("runs-none").hidden = shown > 0 || Boolean(next);
}

$("run-filter").addEventListener("submit", async (event) => {
  event.preventDefault();
  const filter = listFilter();
  $("filter-problem").hidden = true;
  try {
    await queued(() => {
      list.filter = filter;
      list.shown = 0;
      return reloadRuns();
    });
  } catch (error) {
    $("filter-problem").textContent = `Cannot filter so: ${error.message}`;
    $("filter-problem").hidden = false;
  }
});
$("more-runs").addEventListener("click", () => moreRuns().catch(() => {}));

function runItem(run) {
  if (run.question) state.questions.set(run.id, run.question);
  const li = document.createElement("li");
  const link = item("a", run.question || run.id);
  link.href = runPath(run.id);  // an address to share, or to open in another tab
  li.append(link);
  li.classList.toggle("awaiting", run.awaiting === "plan_feedback");
  li.classList.toggle("current", run.id === state.run);
  li.title = run.id;
  const how = run.status !== "running" ? (ENDED[run.status] || run.status)
    : run.phase ? phaseWords(run) : PHASE_WORDS.starting;
  const when = `${Math.round(run.age_seconds / 60)} min ago${run.started_by ? ` · ${run.started_by}` : ""}`;
  const age = item("div", `${how} · ${when}`, "phase");
  age.dataset.age = when;
  li.append(age);
  li.dataset.run = run.id;
  li.addEventListener("click", (event) => {
    if (event.ctrlKey || event.metaKey || event.shiftKey || event.button !== 0) return;  // a new tab: the browser's
    event.preventDefault();
    openRun(run.id);
  });
  return li;
}

// The run view's words in the run's row, as soon as the view has them (the list refreshes every
// few seconds, and would say "writing the plan" under a plan waiting for review).
function syncListed(id, how) {
  const row = [...$("runs").children].find((li) => li.dataset.run === id);
  const line = row && row.querySelector(".phase");
  if (line) line.textContent = `${how} · ${line.dataset.age}`;
}

function runPath(id) {
  return `/runs/${encodeURIComponent(id)}`;
}

async function loadConfig() {
  const config = await api("/api/config");
  $("offline").hidden = !config.offline_demo;
  $("suggestions").hidden = !config.offline_demo;  // what the bundled corpus can answer
  budgetHints(config.budgets || {});
  const { resources } = await api("/api/rag/resources");
  $("resources").replaceChildren(...resources.map((r) => {
    const option = item("option", r.title);
    option.value = r.uri;
    return option;
  }));
  $("resources").hidden = !resources.length;
  $("resources-hint").hidden = Boolean(resources.length);
}

// What an empty budget field means: the operator's default, said with its figure (with no default,
// the operator's maximum is a run's budget).
function budgetHints(budgets) {
  const hint = (value, most, say) => {
    if (value == null && most == null) return "none by default";
    return value == null ? `${say(most)} by default (the maximum)` : `${say(value)} by default` +
      (most != null ? `, at most ${say(most)}` : "");
  };
  $("token-budget").placeholder = hint(budgets.tokens, budgets.tokens_max, thousands);
  $("cost-budget").placeholder = hint(budgets.cost_usd, budgets.cost_usd_max, usd);
}

// Who the page is signed in as; a token that may only read is offered nothing to start or decide.
async function loadMe() {
  const me = await api("/api/me");
  $("signed-in").textContent = me.tokens ? `Signed in as ${me.name} (${me.role})`
    : "No sign-in: this server answers only this machine, as its admin";
  state.readOnly = !me.may_start;
  $("new-run").hidden = state.readOnly;
  $("read-only").hidden = !state.readOnly;
}

$("new-run").addEventListener("submit", async (event) => {
  event.preventDefault();
  const body = {
    question: $("question").value, report_style: $("report-style").value,
    max_step_num: Number($("max-steps").value), auto_accept_plan: $("auto-accept").checked,
    parallel_steps: $("parallel").checked,
    ...budgetFields($("token-budget").value, $("cost-budget").value, "token_budget", "cost_budget_usd"),
    resources: [...$("resources").selectedOptions].map((o) => o.value),
  };
  if ($("locale").value) body.locale = $("locale").value;
  const notice = $("start-notice");
  notice.hidden = true;
  let id;
  try {
    ({ id } = await api("/api/runs", body));
  } catch (error) {
    notice.textContent = `Could not start the run: ${error.message}`;
    notice.hidden = false;
    return;
  }
  $("question").value = "";
  state.reveal = true;  // to the plan once it is there (on a phone, far above the form)
  await openRun(id);
  $("run").scrollIntoView({ block: "start" });
  loadRuns().catch(() => {});
});

// A suggested question fills the box (the person still chooses the options and starts it).
for (const suggestion of document.querySelectorAll("#suggestions button")) {
  suggestion.addEventListener("click", () => {
    $("question").value = suggestion.textContent;
    $("question").focus();
  });
}

$("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem("deerflow-token", $("token").value);
  $("token-form").hidden = true;
  start();
});

// ------------------------------------------------------------------ one run

// Opening a run clears everything the last one showed: its plan, notices, errors and content flows.
async function openRun(id, push = true) {
  if (push && location.pathname !== runPath(id)) history.pushState({ run: id }, "", runPath(id));
  if (state.feed) state.feed.abort();
  clearTimeout(state.retryTimer);
  Object.assign(state, { run: id, after: null, report: "", sources: new Map(), lastStatus: null,
    previews: new Map(), offlineNotice: null, locale: null, resultShown: false, metricsGrade: null });
  for (const list of ["activity", "sources", "citations", "plan-steps", "podcast-script", "evaluation",
    "timeline-stages"]) {
    $(list).replaceChildren();
  }
  for (const text of ["report", "review-message", "run-phase", "run-error", "run-retries", "usage", "flow-notice",
    "budget-line", "budget-message", "cancel-message", "budget-again", "fork-links", "fork-message"]) {
    $(text).replaceChildren();
  }
  closeCancel();
  for (const box of ["report-box", "plan", "review", "clarify", "budget", "run-error", "run-retries", "flows", "evaluation",
    "podcast-box", "podcast-script", "editor", "timeline", "fork-open", "fork-form"]) $(box).hidden = true;
  forgetAudio();
  $("run").hidden = false;
  $("run-title").textContent = state.questions.get(id) || id;
  $("run-title").title = id;
  for (const li of $("runs").children) li.classList.toggle("current", li.dataset.run === id);
  let failure = null;
  try {
    await refresh();
  } catch (error) {
    failure = error;
  }
  if (state.run !== id) return;  // another run was opened meanwhile: its own open shows and follows it
  if (failure) {  // said here, whoever opened the run; a refusal leaves nothing to follow
    showRunError(failure.message);
    if (!askedAgain(failure)) return;
  }
  follow();
}

// The open run's status again in 5 s (one timer: a newer call replaces it).
function refreshSoon() {
  clearTimeout(state.retryTimer);
  state.retryTimer = setTimeout(() => refresh().catch(() => {}), 5000);
}

// The run's error line, hidden when there is none.
function showRunError(text) {
  $("run-error").textContent = text || "";
  $("run-error").hidden = !text;
}

// Whether a failed status request is asked again: a network error, a server restarting or a 5xx
// passes, and the page must not stay on what it last saw (or on nothing, when the run's first status
// failed); a refusal (4xx: no such run, not the caller's, a token needed) stands.
function askedAgain(error) {
  return !(error.status >= 400 && error.status < 500);
}

// Each feed item asks for a fresh status; the answers can arrive out of order, and an older one
// must never overwrite a newer one (the steps would go back to "running").
let refreshes = 0;

async function refresh() {
  const id = state.run;
  const asked = ++refreshes;
  let shown;
  try {
    shown = await api(`/api/runs/${encodeURIComponent(id)}`);
  } catch (error) {
    if (id === state.run && asked === refreshes && askedAgain(error)) refreshSoon();
    throw error;
  }
  if (id !== state.run || asked !== refreshes) return;
  const status = shown.run;
  state.lastStatus = status;
  // Only a running run can be reviewed or answered: a closed one's last status may still say it
  // awaited a review when it was cancelled, terminated or timed out.
  const running = shown.status === "running";
  state.may = shown.may || state.may;
  const phase = status ? phaseWords(status) : shown.indexed && shown.indexed.phase
    ? `${phaseWords(shown.indexed)}, as the server's index has it: no worker has answered (is one running?)`
    : shown.status;
  const ended = endedWords(shown);
  $("run-phase").textContent = running ? `Now: ${phase}` : `Ended: ${ended}`;
  syncListed(id, running ? (status ? phaseWords(status) : phase) : ENDED[shown.status] || shown.status);
  $("run-phase").className = running ? "" : ended.startsWith("finished") ? "ended" : "ended badly";
  $("cancel-run").hidden = !running || !state.may.cancel;
  showForking(id, status, state.may);  // fork.js: the links to its source and forks, and the Fork button
  if (status) {  // the run knows which bundled providers served it
    state.offlineNotice = shown.offline_notice;
    $("offline").hidden = !shown.offline_notice;
    if (shown.offline_notice) $("offline").textContent = shown.offline_notice;
  }
  // A call being retried shows in no event: while the run runs, look again every few seconds.
  $("run-retries").hidden = !shown.retries.length;
  $("run-retries").textContent = shown.retries.join("\n");
  if (shown.status === "running") refreshSoon();
  else clearTimeout(state.retryTimer);
  showRunError(shown.error || (status && status.error) || (shown.result && shown.result.error));
  if (status) {
    const u = status.usage;
    $("usage").textContent = `Model calls: ${u.llm_calls} · tokens: ${thousands(u.total_tokens)} ` +
      `(${thousands(u.input_tokens)} in, ${thousands(u.output_tokens)} out)`;
    showBudget(status, running, shown.budget_forecast);
    showPlan(status, running);
    $("clarify").hidden = !running || status.awaiting !== "clarification_answer" || !state.may.decide;
    $("clarify-question").textContent = status.question || "";
  }
  if (!running) $("review").hidden = $("clarify").hidden = $("budget").hidden = true;
  // The result's report, once: the streamed reporter's text lacks what the run adds around it (notes
  // at the top, the budget's line at the end); later, the person's edits are theirs.
  if (shown.result && shown.result.report && !state.resultShown) {
    state.resultShown = true;
    showReport(shown.result.report);
  }
  if (shown.result) state.locale = shown.result.locale;
  $("flows").hidden = !(shown.status === "completed" && state.report);
}

// A running run's phase in words; the step it is on while it researches; the report, once written,
// is not "being written" while the run closes.
function phaseWords(where) {
  if (where.phase === "reporting" && state.report && where === state.lastStatus) return "report written, finishing";
  const words = PHASE_WORDS[where.phase] || String(where.phase).replaceAll("_", " ");
  const steps = where.steps || [];
  const at = steps.findIndex((step) => step.state === "running");
  return where.phase === "researching" && at >= 0 ? `${words}: step ${at + 1} of ${steps.length}` : words;
}

function endedWords(shown) {
  if (shown.status === "completed" && shown.result) return OUTCOME[shown.result.outcome] || ENDED.completed;
  return ENDED[shown.status] || shown.status || "unknown";
}

function showPlan(status, running) {
  if (!status.plan) return;
  $("plan").hidden = false;
  $("plan-version").textContent = status.plan_history.length ? `v${status.plan_history.length}` : "";
  $("plan-title").textContent = status.plan.title;
  $("plan-thought").textContent = status.plan.thought;
  $("plan-steps").replaceChildren(...status.plan.steps.map((step, i) => {
    const progress = status.steps[i];
    const li = item("li", `${step.title} — ${step.description}`);
    li.append(item("div", progress ? progress.state : "", "phase"));
    if (progress && progress.finding_preview) {
      li.append(item("div", "Finding:", "phase"), markdownBlock(wholeLines(progress.finding_preview), "finding"));
    }
    return li;
  }));
  $("review").hidden = !running || status.awaiting !== "plan_feedback" || !state.may.decide;
  if (state.reveal) {  // the person just started this run: take them to its plan
    state.reveal = false;
    $("plan").scrollIntoView({ block: "start" });
  }
}

async function review(body) {
  try {
    const outcome = await api(`/api/runs/${encodeURIComponent(state.run)}/review`, body);
    $("review-message").textContent = outcome.message;
    $("review").hidden = true;
  } catch (error) {
    $("review-message").textContent = decisionProblem(error);
  }
}

$("accept").addEventListener("click", () => review({ accept: true }));
$("edit-form").addEventListener("submit", (event) => {
  event.preventDefault();
  review({ edit: $("edit-text").value });
  $("edit-text").value = "";
});
$("clarify-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  try {
    await api(`/api/runs/${encodeURIComponent(state.run)}/answer`, { answer: $("clarify-answer").value });
    $("clarify-answer").value = "";
    $("review-message").textContent = "";
  } catch (error) {
    $("review-message").textContent = decisionProblem(error);
  }
});

// ------------------------------------------------------------------ the budget

// Token counts as the CLI and the server's words write them: 14,000.
function thousands(tokens) {
  return tokens.toLocaleString("en-US");
}

// Amounts in USD as the CLI and the Web UI write them (workflows/contracts/budget.py: usd).
function usd(amount) {
  return amount >= 1 ? `$${amount.toFixed(2)}` : `$${amount.toFixed(4)}`;
}

// The fields of a request or a raise from two inputs: only those filled in.
function budgetFields(tokens, cost, tokensField, costField) {
  const fields = {};
  if (tokens) fields[tokensField] = Number(tokens);
  if (cost) fields[costField] = Number(cost);
  return fields;
}

// Spent and remaining of the run's budgets (the run's budget_standing), and while it waits at its
// budget, what the rest and finishing now are expected to cost (the server's words, the CLI's too:
// workflows/research/status_view.py budget_forecast) and the three decisions (POST /api/runs/ID/budget).
function showBudget(status, running, forecast = []) {
  const budget = status.budget, standing = status.budget_standing;
  const paused = running && status.awaiting === "budget";
  $("budget").hidden = !paused || !state.may.decide;
  if (!budget || !standing) return;
  if (paused) pausedAgain(status);
  const spent = thousands(standing.spent_tokens);
  const tokens = budget.tokens === null ? `${spent} tokens spent (no token budget)`
    : `${spent} of ${thousands(budget.tokens)} tokens spent, ${thousands(standing.remaining_tokens)} left`;
  const unpricedOnly = standing.unpriced_models.length && !standing.spent_usd;  // no price: no cost to say
  const cost = unpricedOnly ? `cost unknown: no price for ${standing.unpriced_models.join(", ")}`
    : budget.cost_usd === null ? `${usd(standing.spent_usd)} spent (no cost budget)`
      : `${usd(standing.spent_usd)} of ${usd(budget.cost_usd)} spent, ${usd(standing.remaining_usd)} left`;
  const unpriced = standing.unpriced_models.length && !unpricedOnly
    ? ` · no price for ${standing.unpriced_models.join(", ")}: its tokens count, its cost does not` : "";
  $("budget-line").textContent = `Budget: ${tokens} · ${cost}${budget.cut_short ? " · cut short" : ""}${unpriced}`;
  const sentences = forecast.map((clause) => `${clause[0].toUpperCase()}${clause.slice(1)}.`);
  $("budget-expected").textContent = [`${$("budget-line").textContent}.`, ...sentences].join(" ");
}

// A run that paused again after a budget decision says when, and the old decision's message goes.
function pausedAgain(status) {
  // By the story's order: a decision and the pause after it can share a workflow time.
  const events = status.events || [];
  const paused = events.findLastIndex((e) => e.kind === "phase" && e.message.startsWith("awaiting_budget"));
  const decidedAt = events.findLastIndex((e) => e.kind === "budget");
  const decided = (status.decisions || []).filter((d) => d.kind === "budget");
  const pause = events[paused], last = decided[decided.length - 1];
  const again = paused > decidedAt && decidedAt >= 0 && last !== undefined;
  $("budget-again").hidden = !again;
  if (!again) return;
  $("budget-again").textContent = `Paused again at ${clock(pause.at)}, after ${last.by.name}'s decision at ` +
    `${clock(last.at)} (${last.decision}): the new budget is expected to run out too.`;
  $("budget-message").textContent = "";
}

function clock(timestamp) {
  return new Date(timestamp).toLocaleTimeString();
}

async function decideBudget(body) {
  try {
    const outcome = await api(`/api/runs/${encodeURIComponent(state.run)}/budget`, body);
    $("budget-message").textContent = outcome.message;
    $("budget").hidden = true;
    $("budget-tokens").value = $("budget-usd").value = "";
  } catch (error) {
    $("budget-message").textContent = decisionProblem(error);
  }
}

$("budget-raise-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const amounts = budgetFields($("budget-tokens").value, $("budget-usd").value, "tokens", "cost_usd");
  if (!Object.keys(amounts).length) {
    $("budget-message").textContent = "Not sent: give a new token budget, a new cost budget, or both.";
    return;
  }
  decideBudget({ action: "raise", ...amounts });
});
$("budget-finish").addEventListener("click", () => decideBudget({ action: "finish" }));
$("budget-cancel").addEventListener("click", () => askToCancel(() => decideBudget({ action: "cancel" })));

// ------------------------------------------------------------------ cancelling a run

// Every running or paused run has Cancel, which asks first: a cancelled run stops whatever it is
// doing and writes no report. At a budget pause the banner's Cancel asks the same question and sends
// the budget decision; elsewhere it is POST /api/runs/ID/cancel. Either way the run ends cancelled.
let cancelling = null;

function askToCancel(then) {
  cancelling = then;
  $("cancel-run").hidden = false;
  $("cancel-ask").hidden = true;
  $("cancel-confirm").hidden = false;
  $("cancel-message").textContent = "";
  $("cancel-no").focus();
  $("cancel-confirm").scrollIntoView({ block: "nearest" });
}

function closeCancel() {
  cancelling = null;
  $("cancel-ask").hidden = false;
  $("cancel-confirm").hidden = true;
}

async function cancelRun() {
  try {
    await api(`/api/runs/${encodeURIComponent(state.run)}/cancel`, {});
    $("cancel-message").textContent = "Cancel sent: the run stops in a moment.";
  } catch (error) {
    $("cancel-message").textContent = `Not sent: ${error.message}`;
  }
}

$("cancel-ask").addEventListener("click", () => askToCancel(cancelRun));
$("cancel-no").addEventListener("click", closeCancel);
$("cancel-yes").addEventListener("click", async () => {
  const then = cancelling;
  closeCancel();
  if (then) await then();
  refresh().catch(() => {});
});

// ------------------------------------------------------------------ the live feed

// Follows /api/runs/<id>/events from the last item seen; after a dropped connection or a server
// restart it reconnects from there, so nothing is shown twice or missed. Two opens of a run can
// overlap (a question sent while the page was still starting opens its run, and the start then
// opens the run in the address): the newer feed stops the older, or both would show every item.
async function follow() {
  const id = state.run;
  const controller = new AbortController();
  if (state.feed) state.feed.abort();
  state.feed = controller;
  let delay = 500;
  while (state.run === id && !controller.signal.aborted) {
    try {
      const query = state.after ? `?after=${encodeURIComponent(state.after)}` : "";
      const response = await fetch(`/api/runs/${encodeURIComponent(id)}/events${query}`,
        { headers: headers(false), signal: controller.signal });
      if (!response.ok) throw new Error(`feed answered ${response.status}`);
      if (await eachBlock(response, (block) => handleBlock(id, block) === "end")) return;
      delay = 500;
    } catch (error) {
      if (controller.signal.aborted) return;
    }
    await new Promise((resolve) => setTimeout(resolve, delay));
    delay = Math.min(delay * 2, 5000);
    refreshForFeed();
  }
}

// The blocks of an event stream as they arrive, to `each` until it returns true (then true).
async function eachBlock(response, each) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return false;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      if (each(block)) return true;
    }
  }
}

function handleBlock(id, block) {
  const fields = {};
  for (const line of block.split("\n")) {
    if (!line || line.startsWith(":")) continue;
    const at = line.indexOf(": ");
    if (at > 0) fields[line.slice(0, at)] = line.slice(at + 2);
  }
  if (!fields.event || state.run !== id) return null;
  if (fields.event === "end") {
    refreshForFeed();
    return "end";
  }
  const data = JSON.parse(fields.data);
  if (data.preview) {
    showPreview(data);
    return null;
  }
  if (fields.id) state.after = fields.id;
  if (data.stream_id) endPreviews(data.stream_id);
  showItem(fields.event, data);
  refreshForFeed();
  return null;
}

// The feed asks for a fresh status after each item. A finished run's whole feed arrives at once, and
// the status of a closed run is a query its worker answers by replaying the run's history: one
// request an item was 23 replays to reopen a short run. So one such refresh is in flight at a time,
// and the items that arrive meanwhile ask for one more after it.
let feedRefresh = null;
let feedRefreshAgain = false;
function refreshForFeed() {
  if (feedRefresh) {
    feedRefreshAgain = true;
    return;
  }
  feedRefresh = refresh().catch(() => {}).finally(() => {
    feedRefresh = null;
    if (feedRefreshAgain) {
      feedRefreshAgain = false;
      refreshForFeed();
    }
  });
}

function showItem(kind, data) {
  const activity = $("activity");
  if (kind === "tool_calls") {
    for (const call of data.tool_calls) activity.append(row(data.agent, item("span", ` ${callText(call)}`)));
  } else if (kind === "tool_call_result") {
    sourcesFrom(data.content);
  } else if (kind === "message_chunk" && data.agent === "reporter") {
    showReport(data.content || "");
  } else if (kind === "message_chunk" && data.content && data.agent !== "planner") {
    // A step's finding, rendered; folded to its first line so the list stays a list.
    const body = markdownBlock(data.content);
    const details = document.createElement("details");
    const summary = item("summary", "");
    summary.append(item("span", data.agent, "agent"), item("span", ` ${firstLine(gist(body))}`));
    details.append(summary, body);
    activity.append(row(null, details));
  } else if (kind === "citations") {
    $("citations").replaceChildren(...data.citations.map((c) => {
      const li = document.createElement("li");
      li.append(safeLink(c.url, c.title || c.url));
      return li;
    }));
  } else if (kind === "error") {
    $("run-error").hidden = false;
    $("run-error").textContent = data.error;
  }
}

function row(agent, body) {
  const li = document.createElement("li");
  if (agent) li.append(item("span", agent, "agent"));
  li.append(body);
  return li;
}

// What a tool call did, in a line; a call without an argument worth showing is just its name.
function callText(call) {
  const args = call.args || {};
  if (call.name === "handoff_to_planner") {
    return args.research_topic ? `handed the question to the planner: ${args.research_topic}`
      : "handed the question to the planner";
  }
  const what = args.query || args.url || args.keywords || args.question || (args.code ? "Python code" : "");
  return what ? `${call.name}: ${what}` : call.name;
}

// A step's finding preview is its first characters (FINDING_PREVIEW_CHARS, workflows/research/workflow.py):
// a cut preview loses its last, partial line, so no half-written "**" or link shows as raw markdown.
const FINDING_PREVIEW_CHARS = 300;

function wholeLines(preview) {
  if (preview.length < FINDING_PREVIEW_CHARS || preview.lastIndexOf("\n") <= 0) return preview;
  return `${preview.slice(0, preview.lastIndexOf("\n"))}\n\n…`;
}

// A finding's first words worth reading: its first block that is not a heading (findings open
// with the same "Problem Statement" heading), else all of it.
function gist(block) {
  const first = block.querySelector(":scope > :not(h1, h2, h3, h4, h5, h6)");
  return (first || block).textContent;
}

function firstLine(text) {
  const line = text.trim().split("\n")[0].trim();
  return line.length > 160 ? `${line.slice(0, 160)}…` : line;
}

// Token previews: a model turn's text as it is generated (no feed id: not durable, not resumed).
// The feed's final message of that turn (same stream_id) replaces it; a retried attempt is another
// stream, and the final message ends every attempt's preview of that turn.
function showPreview(data) {
  let preview = state.previews.get(data.id);
  if (!preview) {
    const li = row(data.agent, markdownBlock("", "live"));
    li.className = "preview";
    if (data.agent !== "reporter") $("activity").append(li);
    preview = { li, text: "", agent: data.agent };
    state.previews.set(data.id, preview);
  }
  preview.text += data.content;
  if (preview.agent === "reporter") {
    $("report-box").hidden = false;
    $("report").innerHTML = sanitisedReportHtml(preview.text);
  } else {  // rendered as it grows; the box shows its latest lines
    const block = markdownBlock(preview.text, "live");
    preview.li.lastChild.replaceWith(block);
    block.scrollTop = block.scrollHeight;
  }
}

function endPreviews(streamId) {
  const turn = streamId.slice(0, streamId.lastIndexOf(".") + 1);
  for (const [id, preview] of state.previews) {
    if (!id.startsWith(turn)) continue;
    preview.li.remove();
    state.previews.delete(id);
  }
}

function sourcesFrom(content) {
  let pages;
  try {
    pages = JSON.parse(content);
  } catch {
    return;
  }
  if (!Array.isArray(pages)) return;
  for (const page of pages) {
    if (!page || page.type !== "page" || state.sources.has(page.url)) continue;
    state.sources.set(page.url, page.title);
    const li = document.createElement("li");
    li.append(safeLink(page.url, page.title || page.url));
    $("sources").append(li);
  }
}

// A link only for http(s) addresses; anything else (javascript:, data:) stays plain text.
function safeLink(url, text) {
  let parsed;
  try {
    parsed = new URL(url);
  } catch {
    return item("span", text);
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") return item("span", text);
  const a = item("a", text);
  a.href = parsed.href;
  a.rel = "noopener noreferrer";
  a.target = "_blank";
  return a;
}

// ------------------------------------------------------------------ the report

function sanitisedReportHtml(markdown) {
  const html = marked.parse(markdown, { async: false });
  return DOMPurify.sanitize(html, { ALLOWED_URI_REGEXP: /^(?:https?:|mailto:|#)/i, FORBID_TAGS: ["style", "form"], FORBID_ATTR: ["style"] });
}

// Model-written markdown as sanitised HTML in a <div class="md">, its links opening elsewhere.
function markdownBlock(markdown, className) {
  const block = document.createElement("div");
  block.className = className ? `md ${className}` : "md";
  block.innerHTML = sanitisedReportHtml(markdown);
  return withSafeLinks(block);
}

function withSafeLinks(element) {
  for (const a of element.querySelectorAll("a")) {
    a.rel = "noopener noreferrer";
    a.target = "_blank";
  }
  return element;
}

function showReport(markdown) {
  state.report = markdown;
  $("report-box").hidden = false;
  $("report").innerHTML = sanitisedReportHtml(markdown);
  withSafeLinks($("report"));
}

function download(name, blob) {
  const url = URL.createObjectURL(blob);
  const a = document.createElement("a");
  a.href = url;
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

// An exported report is opened from disk, where no server sends the page's policy: its own policy
// lets it load nothing at all (an image, a video poster or a prefetch the model or a crawled page
// wrote would tell their host that, when and where the report is read). Inline images still show.
const EXPORT_POLICY = "default-src 'none'; img-src data:; base-uri 'none'; form-action 'none'";

// An export by the offline demonstration model says so in its first line, as `starter.py report`'s.
function exportedMarkdown() {
  return state.offlineNotice ? `> ${state.offlineNotice}\n\n${state.report}` : state.report;
}

function exportedHtml() {
  const title = (state.lastStatus && state.lastStatus.plan && state.lastStatus.plan.title) || state.run;
  const doc = document.implementation.createHTMLDocument(title);
  const meta = doc.createElement("meta");
  meta.setAttribute("charset", "utf-8");
  const policy = doc.createElement("meta");
  policy.setAttribute("http-equiv", "Content-Security-Policy");
  policy.setAttribute("content", EXPORT_POLICY);
  doc.head.prepend(meta, policy);
  doc.body.innerHTML = sanitisedReportHtml(exportedMarkdown());
  return `<!doctype html>\n${doc.documentElement.outerHTML}`;
}

// A download is named by the run's question (its first words, in any script), as the CLI names runs.
function fileStem() {
  const question = state.questions.get(state.run) || "";
  const words = question.normalize("NFKD").replace(/\p{M}/gu, "").toLowerCase()
    .replace(/[^\p{L}\p{N}]+/gu, "-").replace(/^-+|-+$/g, "").slice(0, 60).replace(/-+$/, "");
  return words || state.run;
}

$("export-md").addEventListener("click",
  () => download(`${fileStem()}.md`, new Blob([exportedMarkdown()], { type: "text/markdown" })));
$("export-html").addEventListener("click",
  () => download(`${fileStem()}.html`, new Blob([exportedHtml()], { type: "text/html" })));
$("refresh").addEventListener("click", () => loadRuns().catch(() => {}));
setInterval(() => {
  if (!document.hidden) loadRuns().catch(() => {});
}, RUN_LIST_SECONDS * 1000);

// ------------------------------------------------------------------ content flows of a finished report

// Each button starts the server's small workflow for the report shown (edits included) and waits
// for its answer; the button is disabled meanwhile, and the answer or the refusal is shown here.
async function flow(button, busy, work) {
  const run = state.run;
  button.disabled = true;
  $("flow-notice").textContent = busy;
  try {
    const done = await work();
    if (state.run === run) $("flow-notice").textContent = done || "";
  } catch (error) {
    if (state.run === run) $("flow-notice").textContent = error.message;
  } finally {
    button.disabled = false;
  }
}

// The run's report style is not on record here: the report is held to DeerFlow's default sections.
async function evaluate(useModel) {
  const body = { content: state.report, query: state.questions.get(state.run) || "", report_style: "default",
    use_llm: useModel };
  showEvaluation(await api("/api/report/evaluate", body));
  return "";
}

// The metrics once; with the model's judgement, why the grade moved (DeerFlow's 40/60 weighing), its
// scores and its advice, instead of DeerFlow's summary, which repeats the metrics.
function showEvaluation(answer) {
  const m = answer.metrics;
  const box = $("evaluation");
  const judged = answer.llm_evaluation;
  if (!judged) state.metricsGrade = { grade: answer.grade, score: answer.score };
  const lines = [
    `Grade ${answer.grade} (${answer.score} of 10)${judged ? gradeWhy(answer, judged) : ", from the metrics alone"}`,
    [count(m.word_count, "word"), `${count(m.citation_count, "citation")} from ${count(m.unique_sources, "source")}`,
      count(m.image_count, "image")].join(" · "),
    `Sections found: ${m.sections_found.join(", ") || "none"}`,
    `Sections missing: ${m.sections_missing.join(", ") || "none"}`,
  ];
  box.replaceChildren(...lines.map((line) => item("p", line)));
  if (judged) {
    box.append(item("p", `The model's scores: ${Object.entries(judged.scores)
      .map(([name, score]) => `${name.replaceAll("_", " ")} ${score}`).join(" · ")}`));
    for (const [heading, points] of [["Strengths", judged.strengths], ["To improve", judged.weaknesses],
      ["Suggestions", judged.suggestions]]) {
      if (points.length) box.append(item("p", heading, "phase"), listOf(points));
    }
  } else {
    const deeper = item("button", "Ask the model for its evaluation too");
    deeper.type = "button";
    deeper.addEventListener("click", () => flow(deeper, "The model is reading the report…", () => evaluate(true)));
    box.append(deeper);
  }
  box.hidden = false;
}

function gradeWhy(answer, judged) {
  if (!(judged.overall_score > 0)) return ": the model gave no scores, so the grade is the metrics' alone";
  const before = state.metricsGrade ? `${state.metricsGrade.grade} (${state.metricsGrade.score})` : "their score";
  return `: the metrics alone gave ${before}; with the model's judgement (${judged.weighted_score} of 10), ` +
    "the grade weighs the metrics 40 % and the model 60 %";
}

function count(n, noun) {
  return `${n} ${noun}${n === 1 ? "" : "s"}`;
}

function listOf(lines) {
  const list = document.createElement("ul");
  list.append(...lines.map((line) => item("li", line)));
  return list;
}

async function slides() {
  const name = `${fileStem()}.pptx`;
  const response = await request("/api/ppt/generate", { content: state.report, locale: state.locale || "en-US" });
  if (!response.ok) throw await refusal(response);
  download(name, await response.blob());
  return "The slides were downloaded.";
}

// The podcast plays here and can be saved; without a voice the server says so (503) and sends
// the script, which is shown instead.
async function podcast() {
  const run = state.run;
  const response = await request("/api/podcast/generate", { content: state.report });
  if (state.run !== run) return "";  // another run is open now: its page is not this podcast's
  if (response.status === 503) {
    const answer = await response.json();
    if (answer.script) {
      $("podcast-script").replaceChildren(...answer.script.lines.map(
        (line) => item("li", `${line.speaker === "female" ? "Host B" : "Host A"}: ${line.paragraph}`)));
      $("podcast-script").hidden = false;
    }
    return answer.detail;
  }
  if (!response.ok) throw await refusal(response);
  forgetAudio();
  state.audio = URL.createObjectURL(await response.blob());
  $("podcast-audio").src = state.audio;
  $("podcast-download").href = state.audio;
  $("podcast-download").download = `${fileStem()}.mp3`;
  $("podcast-box").hidden = false;
  return "";
}

function forgetAudio() {
  if (!state.audio) return;
  $("podcast-audio").removeAttribute("src");
  $("podcast-download").removeAttribute("href");
  URL.revokeObjectURL(state.audio);
  state.audio = null;
}

$("evaluate").addEventListener("click", (event) => flow(event.target, "Evaluating the report…", () => evaluate(false)));
$("slides").addEventListener("click", (event) => flow(event.target, "Composing the slides…", slides));
$("podcast").addEventListener("click", (event) => flow(event.target, "Writing and recording the podcast…", podcast));

// ------------------------------------------------------------------ editing the report

// The report's markdown in a text box: edited by hand, or a selection (else all of it) given to
// DeerFlow's prose writer, whose streamed answer replaces the selection (or follows it, for
// "continue") when the person says so. Saved edits are the report the exports and flows use.
const prose = { start: 0, end: 0, option: "improve", text: "" };

$("edit-report").addEventListener("click", () => {
  $("editor-text").value = state.report;
  $("prose-result").hidden = true;
  $("editor").hidden = false;
  $("editor-text").focus();
});
$("prose-option").addEventListener("change", () => {
  $("prose-command").hidden = $("prose-option").value !== "zap";
});
$("prose-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const box = $("editor-text");
  const whole = box.selectionStart === box.selectionEnd;
  Object.assign(prose, { start: whole ? 0 : box.selectionStart, end: whole ? box.value.length : box.selectionEnd,
    option: $("prose-option").value, text: "" });
  const button = event.target.querySelector("button");
  flow(button, "The prose writer is writing…", () => askProse(box.value.slice(prose.start, prose.end)));
});

async function askProse(prompt) {
  const response = await request("/api/prose/generate",
    { prompt, option: prose.option, command: $("prose-command").value });
  if (!response.ok) throw await refusal(response);  // the writer failed before its first word
  $("prose-text").textContent = "";
  $("prose-result").hidden = false;
  $("prose-use").disabled = true;  // until the whole answer is in
  try {
    await eachBlock(response, (block) => proseBlock(block));
  } catch {
    $("prose-result").hidden = true;  // broken off: the server's way of saying it failed mid-answer
    throw new Error("The prose writer failed while it was writing; the report is unchanged.");
  }
  $("prose-use").disabled = false;
  return "";
}

// One event of the prose stream: text, its line breaks sent as "\r" (a "\n" would end the event).
function proseBlock(block) {
  const data = block.split("\n").filter((line) => line.startsWith("data: ")).map((line) => line.slice(6)).join("");
  prose.text += data.replaceAll("\r", "\n");
  $("prose-text").textContent = prose.text;
  return false;
}

// The answer in place of the selection (after it, for "continue"), with the selection's own
// leading and trailing line breaks and spaces: a model answers without them, and the heading that
// followed the selection would be glued onto its last line.
$("prose-use").addEventListener("click", () => {
  const box = $("editor-text");
  const selected = box.value.slice(prose.start, prose.end);
  const [lead, trail] = [selected.match(/^\s*/)[0], selected.match(/\s*$/)[0]];
  const answer = prose.text.trim();
  const before = box.value.slice(0, prose.option === "continue" ? prose.end : prose.start);
  const addition = prose.option === "continue" ? `${/\s$/.test(before) ? "" : " "}${answer}`
    : selected.trim() ? `${lead}${answer}${trail}` : answer;
  box.value = before + addition + box.value.slice(prose.end);
  $("prose-result").hidden = true;
});
$("editor-save").addEventListener("click", () => {
  showReport($("editor-text").value);
  $("editor").hidden = true;
  $("flow-notice").textContent = "Edits saved on this page: the exports and the buttons above use them.";
});
$("editor-cancel").addEventListener("click", () => {
  $("editor").hidden = true;
});

// The run in the address opens even when the list cannot be read (a namespace without visibility).
async function start() {
  try {
    await Promise.all([loadConfig(), loadMe()]);
    const listed = loadRuns().catch(() => {});
    const wanted = runInAddress();
    if (wanted) await openRun(wanted, false);
    if (wanted && location.pathname !== runPath(wanted)) history.replaceState({ run: wanted }, "", runPath(wanted));
    await listed;
  } catch (error) {
    showRunError(error.message);
  }
}

// The run an address names: /runs/ID, or ?run=ID (the page's addresses before runs had their own).
function runInAddress() {
  const path = location.pathname.match(/^\/runs\/([^/]+)$/);
  return path ? decodeURIComponent(path[1]) : new URLSearchParams(location.search).get("run");
}

// Back and forward move between the runs opened here.
window.addEventListener("popstate", () => {
  const wanted = runInAddress();
  if (wanted && wanted !== state.run) openRun(wanted, false);
});

// `started` tells a driver (and its tests) that the first layout shift (the offline banner, the run
// list) is over, so what it clicks stays where it was measured.
window.deerflowPage = { openRun, listFilter, exportedHtml, exportedMarkdown, sanitisedReportHtml, state, phaseWords,
  showBudget, showPlan, fileStem, started: false };
start().finally(() => { window.deerflowPage.started = true; });

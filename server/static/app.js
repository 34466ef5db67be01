// Our research page. Plain script, no build step. Everything a model or a web page wrote
// (plans, findings, tool output, the report) is untrusted: it is shown with textContent, and the
// report's markdown goes through marked and then DOMPurify before it touches the DOM. The
// server's Content-Security-Policy allows only this origin's scripts as a second line.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { run: null, after: null, feed: null, report: "", sources: new Map(), lastStatus: null,
  retryTimer: null, previews: new Map() };

function headers(json) {
  const h = json ? { "Content-Type": "application/json" } : {};
  const token = sessionStorage.getItem("deerflow-token");
  if (token) h.Authorization = `Bearer ${token}`;
  return h;
}

async function api(path, body) {
  const response = await fetch(path, body === undefined ? { headers: headers(false) }
    : { method: "POST", headers: headers(true), body: JSON.stringify(body) });
  if (response.status === 401) {
    $("token-form").hidden = false;
    throw new Error("this server needs its token");
  }
  const data = await response.json();
  if (!response.ok) throw new Error(data.detail || response.statusText);
  return data;
}

function item(tag, text, className) {
  const element = document.createElement(tag);
  element.textContent = text;
  if (className) element.className = className;
  return element;
}

// ------------------------------------------------------------------ runs list and new runs

async function loadRuns() {
  const { runs } = await api("/api/runs");
  const list = $("runs");
  list.replaceChildren(...runs.map((run) => {
    const li = item("li", run.id, run.awaiting === "plan_feedback" ? "awaiting" : "");
    const phase = run.awaiting ? `awaiting ${run.awaiting}` : (run.phase || run.status);
    li.append(item("div", `${phase} · ${Math.round(run.age_seconds / 60)} min ago`, "phase"));
    li.dataset.run = run.id;
    li.addEventListener("click", () => openRun(run.id));
    return li;
  }));
}

async function loadConfig() {
  const config = await api("/api/config");
  $("offline").hidden = !config.offline_demo;
  const { resources } = await api("/api/rag/resources");
  $("resources").replaceChildren(...resources.map((r) => {
    const option = item("option", r.title);
    option.value = r.uri;
    return option;
  }));
}

$("new-run").addEventListener("submit", async (event) => {
  event.preventDefault();
  const body = {
    question: $("question").value, report_style: $("report-style").value,
    max_step_num: Number($("max-steps").value), auto_accept_plan: $("auto-accept").checked,
    parallel_steps: $("parallel").checked,
    resources: [...$("resources").selectedOptions].map((o) => o.value),
  };
  if ($("locale").value) body.locale = $("locale").value;
  try {
    const { id } = await api("/api/runs", body);
    await openRun(id);
    loadRuns();
  } catch (error) {
    alert(`Could not start the run: ${error.message}`);
  }
});

$("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem("deerflow-token", $("token").value);
  $("token-form").hidden = true;
  start();
});

// ------------------------------------------------------------------ one run

async function openRun(id) {
  if (state.feed) state.feed.abort();
  Object.assign(state, { run: id, after: null, report: "", sources: new Map(), lastStatus: null,
    previews: new Map() });
  for (const list of ["activity", "sources", "citations", "plan-steps"]) $(list).replaceChildren();
  $("report").replaceChildren();
  $("report-box").hidden = true;
  $("review-message").textContent = "";
  $("run").hidden = false;
  $("run-title").textContent = id;
  await refresh();
  follow();
}

// Each feed item asks for a fresh status; the answers can arrive out of order, and an older one
// must never overwrite a newer one (the steps would go back to "running").
let refreshes = 0;

async function refresh() {
  const id = state.run;
  const asked = ++refreshes;
  const shown = await api(`/api/runs/${encodeURIComponent(id)}`);
  if (id !== state.run || asked !== refreshes) return;
  const status = shown.run;
  state.lastStatus = status;
  const phase = status ? status.phase + (status.awaiting ? ` (awaiting ${status.awaiting})` : "") : shown.status;
  $("run-phase").textContent = `Phase: ${phase}`;
  if (status) {  // the run knows which bundled providers served it
    $("offline").hidden = !shown.offline_notice;
    if (shown.offline_notice) $("offline").textContent = shown.offline_notice;
  }
  // A call being retried shows in no event: while the run runs, look again every few seconds.
  $("run-retries").hidden = !shown.retries.length;
  $("run-retries").textContent = shown.retries.join("\n");
  clearTimeout(state.retryTimer);
  if (shown.status === "running") state.retryTimer = setTimeout(() => refresh().catch(() => {}), 5000);
  const error = shown.error || (status && status.error) || (shown.result && shown.result.error);
  $("run-error").hidden = !error;
  $("run-error").textContent = error || "";
  if (status) {
    const u = status.usage;
    $("usage").textContent = `Model calls: ${u.llm_calls} · tokens: ${u.total_tokens} (${u.input_tokens} in, ${u.output_tokens} out)`;
    showPlan(status);
    $("clarify").hidden = status.awaiting !== "clarification_answer";
    $("clarify-question").textContent = status.question || "";
  }
  if (shown.result && shown.result.report && !state.report) showReport(shown.result.report);
}

function showPlan(status) {
  if (!status.plan) return;
  $("plan").hidden = false;
  $("plan-version").textContent = `v${status.plan_history.length}`;
  $("plan-title").textContent = status.plan.title;
  $("plan-thought").textContent = status.plan.thought;
  $("plan-steps").replaceChildren(...status.plan.steps.map((step, i) => {
    const progress = status.steps[i];
    const li = item("li", `${step.title} — ${step.description}`);
    li.append(item("div", progress ? progress.state : "", "phase"));
    if (progress && progress.finding_preview) li.append(item("div", `Finding: ${progress.finding_preview}`, "phase"));
    return li;
  }));
  $("review").hidden = status.awaiting !== "plan_feedback";
}

async function review(body) {
  try {
    const outcome = await api(`/api/runs/${encodeURIComponent(state.run)}/review`, body);
    $("review-message").textContent = outcome.message;
    $("review").hidden = true;
  } catch (error) {
    $("review-message").textContent = `Not sent: ${error.message}`;
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
  } catch (error) {
    alert(`Not sent: ${error.message}`);
  }
});

// ------------------------------------------------------------------ the live feed

// Follows /api/runs/<id>/events from the last item seen; after a dropped connection or a server
// restart it reconnects from there, so nothing is shown twice or missed.
async function follow() {
  const id = state.run;
  const controller = new AbortController();
  state.feed = controller;
  let delay = 500;
  while (state.run === id && !controller.signal.aborted) {
    try {
      const query = state.after ? `?after=${encodeURIComponent(state.after)}` : "";
      const response = await fetch(`/api/runs/${encodeURIComponent(id)}/events${query}`,
        { headers: headers(false), signal: controller.signal });
      if (!response.ok) throw new Error(`feed answered ${response.status}`);
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          if (handleBlock(id, block) === "end") return;
        }
      }
      delay = 500;
    } catch (error) {
      if (controller.signal.aborted) return;
    }
    await new Promise((resolve) => setTimeout(resolve, delay));
    delay = Math.min(delay * 2, 5000);
    refresh().catch(() => {});
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
    refresh().catch(() => {});
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
  refresh().catch(() => {});
  return null;
}

function showItem(kind, data) {
  const activity = $("activity");
  if (kind === "tool_calls") {
    for (const call of data.tool_calls) {
      const what = call.args.query || call.args.url || call.args.keywords || (call.args.code ? "Python code" : "");
      const li = item("li", ` ${call.name}: ${what}`);
      li.prepend(item("span", data.agent, "agent"));
      activity.append(li);
    }
  } else if (kind === "tool_call_result") {
    sourcesFrom(data.content);
  } else if (kind === "message_chunk" && data.agent === "reporter") {
    showReport(data.content || "");
  } else if (kind === "message_chunk" && data.content && data.agent !== "planner") {
    const li = item("li", ` ${data.content.slice(0, 240)}`);
    li.prepend(item("span", data.agent, "agent"));
    activity.append(li);
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

// Token previews: a model turn's text as it is generated (no feed id: not durable, not resumed).
// The feed's final message of that turn (same stream_id) replaces it; a retried attempt is another
// stream, and the final message ends every attempt's preview of that turn.
function showPreview(data) {
  let preview = state.previews.get(data.id);
  if (!preview) {
    const li = item("li", "", "preview");
    li.append(item("span", data.agent, "agent"), item("span", ""));
    if (data.agent !== "reporter") $("activity").append(li);
    preview = { li, text: "", agent: data.agent };
    state.previews.set(data.id, preview);
  }
  preview.text += data.content;
  if (preview.agent === "reporter") {
    $("report-box").hidden = false;
    $("report").innerHTML = sanitisedReportHtml(preview.text);
  } else {
    preview.li.lastChild.textContent = ` ${preview.text.slice(-240)}`;
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

function showReport(markdown) {
  state.report = markdown;
  $("report-box").hidden = false;
  $("report").innerHTML = sanitisedReportHtml(markdown);
  for (const a of $("report").querySelectorAll("a")) {
    a.rel = "noopener noreferrer";
    a.target = "_blank";
  }
}

function download(name, type, text) {
  const url = URL.createObjectURL(new Blob([text], { type }));
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

function exportedHtml() {
  const title = (state.lastStatus && state.lastStatus.plan && state.lastStatus.plan.title) || state.run;
  const doc = document.implementation.createHTMLDocument(title);
  const meta = doc.createElement("meta");
  meta.setAttribute("charset", "utf-8");
  const policy = doc.createElement("meta");
  policy.setAttribute("http-equiv", "Content-Security-Policy");
  policy.setAttribute("content", EXPORT_POLICY);
  doc.head.prepend(meta, policy);
  doc.body.innerHTML = sanitisedReportHtml(state.report);
  return `<!doctype html>\n${doc.documentElement.outerHTML}`;
}

$("export-md").addEventListener("click", () => download(`${state.run}.md`, "text/markdown", state.report));
$("export-html").addEventListener("click", () => download(`${state.run}.html`, "text/html", exportedHtml()));
$("refresh").addEventListener("click", () => loadRuns());

async function start() {
  try {
    await loadConfig();
    await loadRuns();
    const wanted = new URLSearchParams(location.search).get("run");
    if (wanted) await openRun(wanted);
  } catch (error) {
    $("run-error").textContent = error.message;
  }
}

window.deerflowPage = { openRun, exportedHtml, sanitisedReportHtml, state };
start();

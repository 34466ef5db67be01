// The run's timeline on our page: GET /api/runs/ID/inspection (runtime/inspection_model.py's
// RunInspection, the same data as `starter.py inspect --json`), stage by stage and call by call.
// Everything in it is the run's text (prompts, replies, pages, people's messages): it is shown with
// textContent only, never as markup, and nothing in it becomes a link. Uses app.js's `$`, `api`,
// `item` and `state`.
"use strict";

const timeline = { run: null };

function when(iso) {
  return iso ? iso.replace("T", " ").slice(0, 23) : "-";
}

// The time of day alone, for the lines under the run's own dates.
function clock(iso) {
  return iso ? iso.slice(11, 23) : "-";
}

function seconds(from, to) {
  if (!from || !to) return "still open";
  const value = (Date.parse(to) - Date.parse(from)) / 1000;
  return value < 120 ? `${value.toFixed(2)} s` : `${(value / 60).toFixed(1)} min`;
}

function dollars(amount) {
  return `$${amount.toFixed(4)}`;
}

// One folding block: its summary line and what it holds.
function folded(summary, className, children, open) {
  const details = document.createElement("details");
  details.className = className;
  details.open = Boolean(open);
  details.append(item("summary", summary), ...children);
  return details;
}

function parts(list) {
  return list.map((part) => {
    const box = item("div", "", "part");
    box.append(item("div", part.label, "label"), item("pre", part.text));
    return box;
  });
}

function callFacts(call) {
  const facts = [call.activity, `event ${call.event_id}`, call.state.replace("_", " "),
    call.started_at ? `started ${clock(call.started_at)}` : "not started",
    call.closed_at ? seconds(call.started_at, call.closed_at) : "in flight"];
  if (call.attempts > 1) facts.push(`${call.attempts} attempts`);
  if (call.worker) facts.push(`on ${call.worker}`);
  if (call.usage) {
    facts.push(`${call.usage.model || "model"}: ${call.usage.input_tokens} in / ${call.usage.output_tokens} out tokens · ` +
      (call.usage.priced ? dollars(call.usage.cost_usd) : "unpriced"));
  }
  return facts.join(" · ");
}

function callBlock(call) {
  const inner = [item("p", callFacts(call), "phase")];
  for (const failure of call.failures) inner.push(item("p", `attempt ${failure.attempt} failed: ${failure.message}`, "error"));
  if (call.input.length) inner.push(folded("input", "io", parts(call.input)));
  if (call.output.length) inner.push(folded("output", "io", parts(call.output)));
  const block = folded(call.title, `call ${call.state}`, inner);
  block.dataset.call = call.id;
  return block;
}

function messageText(message) {
  return `${clock(message.at)} · ${message.kind} from ${message.by}: ${message.text}` +
    (message.outcome ? ` → ${message.outcome}` : "");
}

function stageBlock(stage) {
  const tokens = stage.input_tokens ? ` · ${stage.input_tokens} in / ${stage.output_tokens} out tokens` : "";
  const cost = stage.cost_usd ? ` · ${dollars(stage.cost_usd)}` : "";
  const inner = stage.waits.map((wait) => item("p", `Waited for a person (${wait.title}, until ${when(wait.deadline)}): ` +
    (wait.ended_at ? `${wait.ended} at ${clock(wait.ended_at)}` : "still waiting"), "phase"));
  inner.push(...stage.messages.map((message) => item("p", messageText(message), "message")));
  inner.push(...stage.calls.map(callBlock));
  const summary = `${stage.title} · ${clock(stage.started_at)} · ${seconds(stage.started_at, stage.ended_at)}${tokens}${cost}`;
  const block = folded(summary, "stage", inner);
  block.dataset.stage = stage.key;
  return block;
}

function runFacts(inspection) {
  const lines = [`${inspection.workflow_type} · ${inspection.status} · started ${when(inspection.started_at)} · ` +
    `closed ${when(inspection.closed_at)}`,
  `Tokens: ${inspection.input_tokens} in · ${inspection.output_tokens} out · ${dollars(inspection.cost_usd)} ` +
    "(priced models only)"];
  if (inspection.unpriced_models.length) lines.push(`No price for ${inspection.unpriced_models.join(", ")}`);
  if (inspection.forked_from) lines.push(`Forked from ${inspection.forked_from.workflow_id} at ${inspection.forked_from.at}`);
  for (const fork of inspection.forks) lines.push(`Forked as ${fork.workflow_id} at ${fork.at}`);
  return lines.map((line) => item("p", line, "phase"))
    .concat(inspection.problems.map((problem) => item("p", problem, "error")));
}

async function showTimeline() {
  const run = state.run;
  timeline.run = run;
  $("timeline").hidden = false;
  $("timeline-stages").replaceChildren(item("p", "Reading the run's history…", "phase"));
  $("timeline").scrollIntoView({ block: "start" });  // below the report: the button is at the top
  let inspection;
  try {
    inspection = await api(`/api/runs/${encodeURIComponent(run)}/inspection`);
  } catch (error) {
    if (timeline.run === run) $("timeline-stages").replaceChildren(item("p", `Could not read it: ${error.message}`, "error"));
    return;
  }
  if (timeline.run !== run || state.run !== run) return;  // another run was opened meanwhile
  $("timeline-stages").replaceChildren(...runFacts(inspection), ...inspection.stages.map(stageBlock),
    folded("Result", "stage", parts(inspection.result)));
}

$("timeline-open").addEventListener("click", () => showTimeline());
$("timeline-close").addEventListener("click", () => {
  timeline.run = null;
  $("timeline").hidden = true;
});
window.deerflowTimeline = { showTimeline };

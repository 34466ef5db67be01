// Forks of the open run (issue #44 §2): the Fork button beside the timeline's, its form, and the
// links to the run's source and to its forks. Run ids, step titles and edits may have been written by
// anyone: they are shown with textContent only. The server checks again who may fork what.
"use strict";

const forking = { run: null, forks: [] };  // the run whose forks were listed (once per opening), and them
const EDIT_MEANING = { plan: "Plan feedback (optional), as a review's edit:",
  step: "The step's new description (optional):", report: "An instruction to the reporter (optional):" };

// Called by refresh() with each fresh status of the open run.
function showForking(id, status, may) {
  const reached = Boolean(status && (status.locale || status.plan_history.length));  // handed to the planner
  $("fork-open").hidden = !may.fork || !reached || !$("fork-form").hidden;
  if (forking.run !== id) {
    forking.run = id;
    forking.forks = [];
    listForks(id);
  }
  showLinks(status);
  if ($("fork-form").hidden) fillForm(status);  // not while the person is choosing
}

async function listForks(id) {
  try {
    const { forks } = await api(`/api/runs/${encodeURIComponent(id)}/forks`);
    if (forking.run !== id) return;  // another run was opened meanwhile
    forking.forks = forks;
  } catch {
    return;  // the links are extra: the run's view stands without them
  }
  if (state.run === id) showLinks(state.lastStatus);
}

function runLink(id) {
  const link = item("a", id);
  link.href = runPath(id);
  link.addEventListener("click", (event) => {
    if (event.ctrlKey || event.metaKey || event.shiftKey || event.button !== 0) return;
    event.preventDefault();
    openRun(id);
  });
  return link;
}

function showLinks(status) {
  const lines = [];
  const source = status && status.forked_from;
  if (source) {
    const line = item("p", "Forked from ");
    line.append(runLink(source.workflow_id), ` at ${source.stage === "step" ? `step ${source.step}` : `the ${source.stage}`}`);
    lines.push(line);
  }
  for (const fork of forking.forks) {
    const line = item("p", "Fork: ");
    const how = ENDED[fork.status] || fork.status;
    line.append(runLink(fork.id), ` at ${fork.at || "?"} · ${how}${fork.started_by ? ` · by ${fork.started_by}` : ""}`);
    lines.push(line);
  }
  $("fork-links").replaceChildren(...lines);
}

function fillForm(status) {
  const steps = (status && status.steps) || [];
  const chosen = $("fork-step").value;
  $("fork-step").replaceChildren(...steps.map((step, index) => {
    const option = item("option", `${index + 1}. ${step.title}`);
    option.value = String(index + 1);
    return option;
  }));
  if (chosen && Number(chosen) <= steps.length) $("fork-step").value = chosen;
  $("fork-from").querySelector("option[value=step]").disabled = !steps.length;
  if (!steps.length && $("fork-from").value === "step") $("fork-from").value = "plan";
  stageChosen();
}

function stageChosen() {
  const stage = $("fork-from").value;
  $("fork-step-label").hidden = stage !== "step";
  $("fork-edit-meaning").textContent = EDIT_MEANING[stage];
}

$("fork-from").addEventListener("change", stageChosen);

$("fork-open").addEventListener("click", () => {
  fillForm(state.lastStatus);
  $("fork-form").hidden = false;
  $("fork-open").hidden = true;
  $("fork-message").textContent = "";
});

$("fork-close").addEventListener("click", () => {
  $("fork-form").hidden = true;
  $("fork-open").hidden = false;
});

$("fork-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const run = state.run;
  const body = { from: $("fork-from").value };
  if (body.from === "step") body.step = Number($("fork-step").value);
  if ($("fork-style").value) body.report_style = $("fork-style").value;
  if ($("fork-locale").value) body.locale = $("fork-locale").value;
  const edit = $("fork-edit").value.trim();
  if (edit) body.edit = edit;
  $("fork-message").textContent = "Starting the fork…";
  let started;
  try {
    started = await api(`/api/runs/${encodeURIComponent(run)}/fork`, body);
  } catch (error) {
    if (state.run === run) $("fork-message").textContent = `Not started: ${error.message}`;
    return;
  }
  $("fork-form").hidden = true;
  $("fork-edit").value = "";
  loadRuns().catch(() => {});
  await openRun(started.id);  // to the fork, which says where it came from
});

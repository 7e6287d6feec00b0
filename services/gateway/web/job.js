// One job: its figures, its plots, and its events as they happen, until it finishes.
import { api, FINISHED, ms, problem, setBadge, times, when } from "./common.js";

const RETRY_MS = 2000;
const REFRESH_MS = 500;
// Payload fields worth a glance in the log; the whole event is at /v1/jobs/{id}/events.
const DETAIL = ["task", "wall_s", "candidate_id", "step_id", "params", "median_ms", "best_ms", "best_time_ms",
  "speedup", "speedup_ci", "configs_evaluated", "stage", "reason", "summary"];

const jobId = decodeURIComponent(location.pathname.split("/").pop());
const base = `/v1/jobs/${encodeURIComponent(jobId)}`;
const $ = (id) => document.getElementById(id);

function showError(message) {
  $("error").textContent = message;
  $("error").hidden = !message;
}

function render(job) {
  setBadge($("status"), job.status);
  $("cancel").hidden = FINISHED.has(job.status);
  document.title = `kforge · ${job.job_id} · ${job.status}`;
  const facts = [
    ["Kernel", job.kernel_name], ["Strategy", job.strategy], ["Run", job.run],
    ["Device", job.device && (job.replay ? `${job.device} (replayed measurements)` : job.device)],
    ["Baseline ms", ms(job.baseline_ms)], ["Best ms", ms(job.best_ms)], ["Speedup", times(job.speedup)],
    ["Submitted", when(job.submitted_at)], ["Updated", when(job.updated_at)], ["Events", job.events],
    ["Summary", job.summary, "wide"],
    ["Failure", job.failure && (job.failed_stage ? `${job.failed_stage}: ${job.failure}` : job.failure), "wide"],
  ].filter(([, value, wide]) => !wide || value); // summary and failure only when there is one
  $("summary").replaceChildren(...facts.map(([name, value, wide]) => {
    const div = document.createElement("div");
    div.className = wide ?? "";
    const dt = document.createElement("dt");
    const dd = document.createElement("dd");
    dt.textContent = name;
    dd.textContent = value ?? "—";
    div.append(dt, dd);
    return div;
  }));
}

// A step's speedup over the kernel it replaced, with the 95% interval of timing the two in turn.
const speedup = (value, ci) => value == null ? "—"
  : `${value.toFixed(3)}× ` + (ci ? `[${ci[0].toFixed(3)}, ${ci[1].toFixed(3)}]` : "(no interval)");

// Every step the job acted on (strategy tune: its one search step), from the tracker.
async function loadSteps() {
  const response = await api(`${base}/tracker`);
  if (!response.ok) return;
  const tracker = await response.json();
  const rows = tracker.tried.length ? tracker.tried : tracker.steps.map((s) => ({
    step_id: s.step_id, status: "accepted", old_ms: s.old_execution_time, new_ms: s.new_execution_time,
    speedup: s.speedup, speedup_ci: s.speedup_ci, reason: "" }));
  $("steps").tBodies[0].replaceChildren(...rows.map((r) => {
    const tr = document.createElement("tr");
    const cells = [r.step_id, r.status, ms(r.old_ms), ms(r.new_ms), speedup(r.speedup, r.speedup_ci),
      r.status === "accepted" ? "" : r.reason];
    for (const [i, text] of cells.entries()) {
      const td = document.createElement("td");
      td.textContent = text;
      if (i === 2 || i === 3) td.className = "num";
      tr.append(td);
    }
    return tr;
  }));
  $("no-steps").hidden = rows.length > 0;
}

async function load() {
  const response = await api(base);
  if (!response.ok) throw new Error(`Could not read job ${jobId}: ${await problem(response)}`);
  const job = await response.json();
  render(job);
  loadSteps().catch((e) => showError(e.message));
  return job;
}

let refreshing = null;
function refreshSoon() { // events come in bursts: read the job once per burst, not once per event
  refreshing ??= setTimeout(() => {
    refreshing = null;
    load().catch((e) => showError(e.message));
  }, REFRESH_MS);
}

// Shown as an <img> of a blob rather than inlined: the two SVGs' element ids cannot collide, and the
// request can carry the API key, which a plain <img src> cannot.
async function loadPlot(name) {
  const img = $(name);
  try {
    const response = await api(`${base}/plots/${name}.svg`);
    if (!response.ok) throw new Error(await problem(response));
    const old = img.src;
    img.src = URL.createObjectURL(await response.blob());
    if (old.startsWith("blob:")) URL.revokeObjectURL(old);
  } catch (e) {
    img.alt = `${name} plot unavailable (${e.message})`;
  }
}

const loadPlots = () => Promise.all([loadPlot("history"), loadPlot("landscape")]);

function logLine(time, type, detail, className = "") {
  const li = document.createElement("li");
  li.className = className;
  for (const [part, text] of [["time", time], ["type", type], ["detail", detail]]) {
    const span = document.createElement("span");
    span.className = part;
    span.textContent = span.title = text;
    li.append(span);
  }
  const log = $("log");
  const following = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
  log.append(li);
  if (following) log.scrollTop = log.scrollHeight; // keep up with the newest unless the reader scrolled back
}

const shown = (v) => typeof v === "number" ? String(Number(v.toPrecision(4)))
  : typeof v === "object" ? JSON.stringify(v) : String(v);

function showEvent(event) {
  const detail = DETAIL.filter((k) => event.payload[k] != null)
    .map((k) => `${k.replaceAll("_", " ")} ${shown(event.payload[k])}`).join(" · ");
  logLine(when(event.occurred_at).slice(11), event.type, detail);
  refreshSoon();
}

// Server-Sent Events parsed here: EventSource cannot send the X-API-Key header.
async function* sse(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let message = { data: [] };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    const lines = (buffer + value).split(/\r\n|\r|\n/);
    buffer = lines.pop(); // a line cut off by the chunk's end waits for the rest
    for (const line of lines) {
      if (line === "") { // a blank line ends a message
        if (message.data.length) yield { ...message, data: message.data.join("\n") };
        message = { data: [] };
      } else if (!line.startsWith(":")) { // ':' starts a keep-alive comment
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const text = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "data") message.data.push(text);
        else if (field === "event" || field === "id") message[field] = text;
      }
    }
  }
}

// Shows each event as it comes and returns the finished job from the stream's `end`. A dropped
// connection is resumed after the last event seen, which the server honours through Last-Event-ID.
async function follow() {
  let last = 0;
  for (;;) {
    try {
      const response = await api(`${base}/stream`, { headers: { "Last-Event-ID": String(last) } });
      if (!response.ok) throw new Error(await problem(response));
      showError("");
      for await (const message of sse(response.body)) {
        if (message.event === "end") return JSON.parse(message.data);
        last = Number(message.id);
        showEvent(JSON.parse(message.data));
      }
      throw new Error("the connection closed");
    } catch (e) {
      showError(`Live progress interrupted (${e.message}); reconnecting…`);
    }
    await new Promise((resolve) => setTimeout(resolve, RETRY_MS));
  }
}

async function cancel() {
  if (!confirm(`Cancel job ${jobId}? Work under way stops at its next batch.`)) return;
  $("cancel").disabled = true;
  const response = await api(`${base}/cancel`, {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ reason: "cancelled from the web page" }),
  });
  // 409: it ended meanwhile, and the stream shows how
  if (response.ok) render(await response.json());
  else showError(`Could not cancel: ${await problem(response)}`);
  $("cancel").disabled = false;
}

async function main() {
  $("job-id").textContent = jobId;
  $("cancel").addEventListener("click", cancel);
  let job;
  try {
    job = await load();
  } catch (e) {
    setBadge($("status"), "unknown");
    return showError(e.message);
  }
  const wasFinished = FINISHED.has(job.status);
  loadPlots();
  $("live").hidden = wasFinished;
  const end = await follow();
  $("live").hidden = true;
  render(end);
  logLine(when(end.updated_at).slice(11), "end", `job ${end.status}`, "end");
  if (!wasFinished) loadPlots(); // they drew the job as it was when the page opened
}

main();

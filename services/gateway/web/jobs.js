// The job list, read again every few seconds.
import { api, badge, cell, ms, problem, times, when } from "./common.js";

const REFRESH_MS = 3000;
const error = document.getElementById("error");

async function refresh() {
  try {
    const response = await api("/v1/jobs");
    if (!response.ok) throw new Error(await problem(response));
    render(await response.json());
    error.hidden = true;
  } catch (e) {
    error.textContent = `Could not read the job list (${e.message}); trying again.`;
    error.hidden = false;
  }
  setTimeout(refresh, REFRESH_MS); // from the answer, so a slow server never has requests piling up
}

function render(jobs) {
  const rows = jobs.reverse().map((job) => { // the server lists oldest first; the newest matter most
    const link = document.createElement("a");
    link.href = `/jobs/${encodeURIComponent(job.job_id)}`;
    link.textContent = job.job_id;
    const tr = document.createElement("tr");
    tr.append(cell(link, "id"), cell(job.kernel_name), cell(job.strategy), cell(job.run), cell(badge(job.status)),
      cell(ms(job.baseline_ms), "num"), cell(ms(job.best_ms), "num"), cell(times(job.speedup), "num"),
      cell(when(job.submitted_at), "time"));
    return tr;
  });
  document.querySelector("#jobs tbody").replaceChildren(...rows);
  document.getElementById("empty").hidden = jobs.length > 0;
}

refresh();

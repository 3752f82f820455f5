// The "Training job" view: draws /training-job/data for the task instance in the page's query
// string, one try at a time (a picker), and refreshes itself while the job may still change.
// No build step, no CDN.
(function () {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const charts = {};
  let timer = null;

  // The try shown: ?try_number= on this page, else the one Airflow's own try selector put in the
  // address of the page around this tab (same origin), else none: the server shows the current try.
  function initialTry() {
    const own = new URLSearchParams(window.location.search).get("try_number");
    if (own) return own;
    try {
      return new URLSearchParams(window.parent.location.search).get("try_number");
    } catch (err) {
      return null;
    }
  }
  let selectedTry = initialTry();
  const COLORS = { training: "#2b6cb0", validation: "#dd6b20" };

  function fmtSeconds(s) {
    if (s == null) return "";
    s = Math.round(s);
    const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
    return h ? `${h} h ${m} min` : m ? `${m} min ${sec} s` : `${sec} s`;
  }

  function fmtNumber(v, digits) {
    // a diverged metric arrives as "NaN", "Infinity" or "-Infinity" (JSON has no such numbers)
    return typeof v === "number" ? v.toFixed(digits) : typeof v === "string" ? v : "";
  }

  function progressText(p) {
    if (!p) return "";
    const parts = [];
    if (p.epoch != null) parts.push(`epoch ${p.epoch}${p.total_epochs != null ? "/" + p.total_epochs : ""}`);
    if (p.step != null) parts.push(`step ${p.step}${p.total_steps != null ? "/" + p.total_steps : ""}`);
    if (p.percent != null) parts.push(`${p.percent.toFixed(1)} %`);
    if (p.eta_seconds != null) parts.push(`ETA ${fmtSeconds(p.eta_seconds)}`);
    return parts.join(" · ") || "—";
  }

  function costText(c) {
    if (!c) return "—";
    const parts = [];
    if (c.total_usd != null) parts.push(`$${c.total_usd.toFixed(4)}`);
    if (c.estimated_total_usd != null) parts.push(`of ~$${c.estimated_total_usd.toFixed(4)} estimated`);
    if (c.billable_seconds != null) parts.push(`${fmtSeconds(c.billable_seconds)} billable`);
    return parts.join(" ") || "—";
  }

  // uPlot wants one shared x array: the union of the series' epochs, gaps as null.
  function alignedData(curves) {
    const xs = [...new Set(curves.flatMap((c) => c.points.map((p) => p[0])))].sort((a, b) => a - b);
    const ys = curves.map((c) => {
      const at = new Map(c.points.map((p) => [p[0], p[1]]));
      return xs.map((x) => (at.has(x) ? at.get(x) : null));
    });
    return [xs, ...ys];
  }

  function drawChart(name, curves) {
    const fig = $("chart-" + name);
    const plot = fig.querySelector(".plot");
    const total = curves.reduce((n, c) => n + c.points.length, 0);
    for (const c of curves) fig.dataset["points" + c.name[0].toUpperCase() + c.name.slice(1)] = c.points.length;
    fig.querySelector(".empty").hidden = total > 0;
    plot.hidden = total === 0;
    if (total === 0) return;
    const data = alignedData(curves);
    const key = curves.map((c) => c.name).join(",");
    const existing = charts[name];
    if (existing && existing.key === key) {
      existing.plot.setData(data);
      return;
    }
    if (existing) existing.plot.destroy();
    const opts = {
      width: Math.max(320, Math.min(560, window.innerWidth / 2 - 50)),
      height: 240,
      scales: { x: { time: false } },
      axes: [{ label: "epoch" }, { label: name }],
      series: [
        { label: "epoch" },
        ...curves.map((c) => ({ label: c.name, stroke: COLORS[c.name] || "#718096", width: 2, spanGaps: true,
          points: { show: true, size: 5 } })),
      ],
    };
    charts[name] = { key, plot: new uPlot(opts, data, plot) };
  }

  function renderCheckpoints(view) {
    const body = $("checkpoints").querySelector("tbody");
    body.replaceChildren();
    for (const c of view.job.checkpoints || []) {
      const tr = document.createElement("tr");
      tr.dataset.checkpointId = c.id;
      const badges = [];
      if (c.id === view.final_checkpoint_id) badges.push("final");
      if (c.id === view.best_checkpoint_id) badges.push("best");
      tr.dataset.marks = badges.join(" ");
      const metrics = Object.entries(c.metrics || {}).map(([k, v]) => `${k} ${fmtNumber(v, 4)}`).join(", ");
      const cells = [c.id, c.epoch ?? "", c.step ?? "", c.kind ?? "", metrics, c.path ?? ""];
      cells.forEach((text, i) => {
        const td = document.createElement("td");
        td.textContent = text;
        if (i === 0) for (const b of badges) {
          const span = document.createElement("span");
          span.className = "badge badge-" + b;
          span.textContent = b;
          td.append(span);
        }
        if (i === 5) td.className = "path";
        tr.append(td);
      });
      body.append(tr);
    }
    if (!body.children.length) {
      const tr = document.createElement("tr");
      tr.innerHTML = '<td colspan="6">No checkpoints yet.</td>';
      body.append(tr);
    }
  }

  function renderEvents(job) {
    const list = $("events");
    list.replaceChildren();
    for (const e of job.events || []) {
      const li = document.createElement("li");
      li.className = "level-" + (e.level || "info");
      const time = document.createElement("time");
      time.textContent = e.created_at ? new Date(e.created_at).toLocaleTimeString() + " " : "";
      li.append(time, `[${e.type}] ${e.message || ""}`);
      list.append(li);
    }
    if (!list.children.length) list.innerHTML = "<li>No platform events.</li>";
  }

  function renderTries(view) {
    const picker = $("try-picker");
    const tries = view.tries || [];
    $("try-bar").hidden = tries.length < 2; // as Airflow's own try selector: once there was a retry
    picker.replaceChildren();
    for (const t of tries) {
      const option = document.createElement("option");
      option.value = String(t.try_number);
      const job = t.job_id ? `job ${t.job_id}${t.job_state ? " (" + t.job_state + ")" : ""}` : "no job";
      option.textContent = `${t.try_number}: ${t.ti_state || "—"}, ${job}`;
      option.selected = t.try_number === view.try_number;
      picker.append(option);
    }
    $("app").dataset.tryNumber = view.try_number ?? "";
  }

  // The training program's own log lines (the last ones one read gave; null: the platform has none).
  function renderProgramLog(view) {
    const log = view.program_log;
    $("program-log").hidden = !log;
    if (!log) return;
    const notes = [];
    if (log.earlier) notes.push(`${log.earlier} earlier lines not shown.`);
    if (!log.complete) notes.push("The log is longer than one read: these are not its last lines.");
    if (log.note) notes.push(log.note);
    else if (!log.lines.length) notes.push("No lines yet.");
    $("program-log-note").textContent = notes.join(" ");
    $("program-log-note").hidden = notes.length === 0;
    $("program-log-lines").textContent = log.lines.join("\n");
  }

  function render(view) {
    renderTries(view);
    const app = $("app");
    app.dataset.kind = view.kind;
    app.dataset.live = view.live;
    $("message").textContent = view.message;
    $("message").hidden = view.kind === "training";
    $("job").hidden = view.kind !== "training";
    if (view.kind !== "training") return;
    $("platform").textContent = view.platform_name || view.platform;
    $("job-id").textContent = view.job_id;
    const link = $("console-link");
    link.hidden = !view.console_url;
    if (view.console_url) link.href = view.console_url;
    $("stale").hidden = !view.stale_reason;
    $("stale").textContent = view.stale_reason || "";
    $("ti-state").textContent = view.ti_state || "—";
    $("seen").textContent = view.seen_at
      ? `${new Date(view.seen_at).toLocaleTimeString()} (${view.source === "platform" ? "from the platform" : "from XCom"})`
      : "";
    const job = view.job;
    const state = $("state");
    state.textContent = job ? job.state : "unknown";
    state.dataset.state = job ? job.state : "";
    $("raw-status").textContent = job ? job.raw_status : "";
    $("progress").textContent = job ? progressText(job.progress) : "";
    $("cost").textContent = job ? costText(job.cost) : "";
    $("reason").hidden = !view.reason;
    $("reason").textContent = view.reason ? `Reason: ${view.reason}` : "";
    for (const [name, curves] of Object.entries(view.curves || {})) drawChart(name, curves);
    if (job) {
      renderCheckpoints(view);
      renderEvents(job);
    }
    renderProgramLog(view);
  }

  function dataUrl() {
    const query = new URLSearchParams(window.location.search);
    query.delete("try_number");
    if (selectedTry) query.set("try_number", selectedTry);
    return "data?" + query.toString();
  }

  async function refresh() {
    window.clearTimeout(timer);
    const asked = selectedTry;
    let view = null;
    try {
      const response = await fetch(dataUrl(), { credentials: "same-origin" });
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      view = await response.json();
      if (asked !== selectedTry) return; // the user picked another try meanwhile: that answer comes
      render(view);
    } catch (err) {
      $("message").hidden = false;
      $("message").textContent = `Could not load the training job view: ${err.message}`;
    }
    const delay = view ? view.refresh_seconds * 1000 : 10000;
    if (!view || view.live) timer = window.setTimeout(refresh, delay);
  }

  $("try-picker").addEventListener("change", (event) => {
    selectedTry = event.target.value;
    refresh();
  });
  refresh();
})();

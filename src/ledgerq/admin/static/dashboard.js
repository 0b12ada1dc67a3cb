// ledgerq dashboard: control buttons (POST with the CSRF header) and live numbers and charts.
// Served by ledgerq itself; no external script, no inline script (see the CSP header).
(function () {
  "use strict";
  var csrf = (document.querySelector('meta[name="csrf-token"]') || {}).content || "";

  function toast(text, bad) {
    var box = document.getElementById("toast");
    if (!box) return;
    box.textContent = text;
    box.className = bad ? "show bad" : "show";
    setTimeout(function () { box.className = ""; }, 4000);
  }

  function post(path) {
    return fetch(path, {
      method: "POST",
      credentials: "same-origin",
      headers: { "X-CSRF-Token": csrf, "Accept": "application/json" },
    }).then(function (response) {
      if (response.ok) return response;
      return response.json().catch(function () { return {}; }).then(function (body) {
        throw new Error(body.detail || ("HTTP " + response.status));
      });
    });
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-action]");
    if (!button) return;
    event.preventDefault();
    button.disabled = true;
    post(button.getAttribute("data-action")).then(function () {
      var then = button.getAttribute("data-then");
      if (then) { window.location = then; } else { window.location.reload(); }
    }).catch(function (error) {
      button.disabled = false;
      toast(error.message, true);
    });
  });

  var overview = document.getElementById("overview");
  if (!overview) return;

  var history = [];  // {at, finished, depth}
  var lastFinished = {};  // queue -> finished count at the previous poll
  var lastAt = null;

  function getJSON(path) {
    return fetch(path, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (r) { if (!r.ok) throw new Error("HTTP " + r.status); return r.json(); });
  }

  function cell(row, text, cls) {
    var td = document.createElement("td");
    td.textContent = text;
    if (cls) td.className = cls;
    row.appendChild(td);
    return td;
  }

  function button(label, path, danger) {
    var b = document.createElement("button");
    b.className = danger ? "act danger" : "act";
    b.setAttribute("data-action", path);
    b.textContent = label;
    return b;
  }

  function finished(counts) {
    return (counts.succeeded || 0) + (counts.dead || 0) + (counts.cancelled || 0);
  }

  function renderQueues(stats, seconds) {
    var body = document.querySelector("#queues tbody");
    if (!body) return;
    body.textContent = "";
    stats.queues.forEach(function (q) {
      var row = document.createElement("tr");
      row.setAttribute("data-queue", q.name);
      var link = document.createElement("a");
      link.href = "/dashboard/jobs?queue=" + encodeURIComponent(q.name);
      link.textContent = q.name;
      cell(row, "").appendChild(link);
      cell(row, q.queued, "num");
      cell(row, q.running, "num");
      cell(row, q.counts.failed || 0, "num");
      cell(row, q.counts.dead || 0, "num");
      cell(row, q.counts.succeeded || 0, "num");
      var life = q.lifetime;
      cell(row, life ? life.enqueued + " / " + life.succeeded + " / " + life.dead : "-",
        "num lifetime");
      var done = finished(q.counts);
      var rate = (seconds && q.name in lastFinished)
        ? Math.max(done - lastFinished[q.name], 0) / seconds : null;
      lastFinished[q.name] = done;
      cell(row, rate === null ? "-" : rate.toFixed(1), "num rate");
      cell(row, q.latency_seconds.toFixed(1) + " s", "num");
      cell(row, q.paused ? "paused" : "active");
      var td = cell(row, "");
      td.appendChild(q.paused
        ? button("Resume", "/admin/queues/" + encodeURIComponent(q.name) + "/resume", false)
        : button("Pause", "/admin/queues/" + encodeURIComponent(q.name) + "/pause", true));
      body.appendChild(row);
    });
  }

  function renderWorkers(data) {
    var count = document.getElementById("worker-count");
    if (count) count.textContent = "(" + data.workers.length + ")";
    var body = document.querySelector("#workers tbody");
    if (!body) return;
    body.textContent = "";
    if (!data.workers.length) {
      var empty = document.createElement("tr");
      var td = cell(empty, "none", "empty");
      td.colSpan = 5;
      body.appendChild(empty);
    }
    data.workers.forEach(function (w) {
      var row = document.createElement("tr");
      cell(row, w.worker_id);
      cell(row, w.status);
      cell(row, w.running_jobs, "num");
      cell(row, w.queues.join(", "));
      cell(row, (w.heartbeat_age_seconds === null ? "-" : w.heartbeat_age_seconds.toFixed(1)) + " s", "num");
      body.appendChild(row);
    });
  }

  function chart(id, values, color) {
    var canvas = document.getElementById(id);
    if (!canvas || !canvas.getContext) return;
    var ctx = canvas.getContext("2d"), w = canvas.width, h = canvas.height;
    ctx.clearRect(0, 0, w, h);
    var max = Math.max.apply(null, values.concat([1]));
    ctx.strokeStyle = "#d0d7de";
    ctx.beginPath(); ctx.moveTo(0, h - 0.5); ctx.lineTo(w, h - 0.5); ctx.stroke();
    ctx.fillStyle = "#57606a";
    ctx.font = "11px sans-serif";
    ctx.fillText(max.toFixed(max < 10 ? 1 : 0), 4, 12);
    if (values.length < 2) return;
    ctx.strokeStyle = color;
    ctx.lineWidth = 2;
    ctx.beginPath();
    values.forEach(function (v, i) {
      var x = (i / (values.length - 1)) * (w - 2) + 1;
      var y = h - 2 - (v / max) * (h - 18);
      if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
    });
    ctx.stroke();
  }

  function poll() {
    Promise.all([getJSON("/admin/queue/stats"), getJSON("/admin/metrics"),
                 getJSON("/admin/queue/workers")]).then(function (results) {
      var stats = results[0], metrics = results[1], workers = results[2];
      var seconds = lastAt === null ? null : metrics.at - lastAt;
      var previous = history.length ? history[history.length - 1] : null;
      var depth = 0;
      Object.keys(metrics.queue_lengths).forEach(function (k) { depth += metrics.queue_lengths[k]; });
      var throughput = previous && seconds ? Math.max(metrics.finished_total - previous.finished, 0) / seconds : 0;
      history.push({ finished: metrics.finished_total, throughput: throughput, depth: depth });
      if (history.length > 90) history.shift();
      renderQueues(stats, seconds);
      renderWorkers(workers);
      chart("chart-throughput", history.map(function (p) { return p.throughput; }), "#1f6feb");
      chart("chart-depth", history.map(function (p) { return p.depth; }), "#bf8700");
      lastAt = metrics.at;
      overview.setAttribute("data-updated", String(metrics.at));
    }).catch(function (error) { toast("live update failed: " + error.message, true); });
  }

  poll();
  setInterval(poll, 2000);
})();

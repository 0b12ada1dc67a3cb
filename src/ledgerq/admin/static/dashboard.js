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

  // ``body``: JSON text sent as the request's body (a button's data-body), or null.
  function post(path, body) {
    var headers = { "X-CSRF-Token": csrf, "Accept": "application/json" };
    var init = { method: "POST", credentials: "same-origin", headers: headers };
    if (body !== null) {
      headers["Content-Type"] = "application/json";
      init.body = body;
    }
    return fetch(path, init).then(function (response) {
      if (response.ok) return response;
      return response.json().catch(function () { return {}; }).then(function (body) {
        throw new Error(body.detail || ("HTTP " + response.status));
      });
    });
  }

  // A button with data-report shows what its action did in the element of that id instead
  // of reloading the page: its data-template with {field} taken from the JSON answer.
  function report(button, response) {
    return response.json().then(function (answer) {
      var box = document.getElementById(button.getAttribute("data-report"));
      var text = (button.getAttribute("data-template") || "done.").replace(
        /\{(\w+)\}/g, function (_, key) { return String(answer[key]); });
      if (box) {
        box.insertBefore(document.createTextNode(text + " "), box.firstChild);
        box.setAttribute("data-total", String(answer.total));
        box.hidden = false;
      }
      if (button.parentNode) button.parentNode.hidden = true;
      toast(text, false);
    });
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-action]");
    if (!button) return;
    event.preventDefault();
    button.disabled = true;
    post(button.getAttribute("data-action"), button.getAttribute("data-body"))
      .then(function (response) {
        if (button.hasAttribute("data-report")) return report(button, response);
        var then = button.getAttribute("data-then");
        if (then) { window.location = then; } else { window.location.reload(); }
      }).catch(function (error) {
      button.disabled = false;
      toast(error.message, true);
    });
  });

  var overview = document.getElementById("overview");
  if (!overview) return;

  var depth = [];  // queued jobs at each poll (the live depth chart)
  var lastFinished = {};  // queue -> finished count at the previous poll
  var lastAt = null;
  var lastTotals = null;  // totals per state at the previous poll
  // Per-minute series of the last hour, seeded from the server's history on load.
  var minutes = readHistory();

  function readHistory() {
    var box = document.getElementById("charts");
    var data = {};
    try { data = JSON.parse(box.getAttribute("data-history") || "{}"); } catch (e) { data = {}; }
    return { start: data.start || 0, succeeded: data.succeeded || [], dead: data.dead || [] };
  }

  var timers = [];
  var stopped = false;

  // A 401 means the session ended (signed out elsewhere, or serve restarted): stop polling
  // and say so once, instead of a failing request and a toast every few seconds.
  function checked(r) {
    if (r.status === 401 && !stopped) {
      stopped = true;
      timers.forEach(clearInterval);
      toast("session ended: reload the page to sign in again", true);
    }
    if (!r.ok) throw new Error("HTTP " + r.status);
    return r;
  }

  function getJSON(path) {
    return fetch(path, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(checked).then(function (r) { return r.json(); });
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
      if (q.counts.dead) {  // the bulk retry's first step: the count, then a confirmation
        var retry = document.createElement("a");
        retry.className = "retry-dead";
        retry.href = "/dashboard/retry-dead?queue=" + encodeURIComponent(q.name);
        retry.textContent = "Retry dead";
        td.appendChild(document.createTextNode(" "));
        td.appendChild(retry);
      }
      body.appendChild(row);
    });
  }

  function isActive(w) { return w.status === "active" || w.status === "running"; }

  function renderWorkers(data) {
    // Active workers first, then the 20 most recently seen stopped and dead ones.
    var active = data.workers.filter(isActive);
    var gone = data.workers.filter(function (w) { return !isActive(w); }).slice(0, 20);
    var count = document.getElementById("worker-count");
    if (count) count.textContent = "(" + active.length + " active)";
    var body = document.querySelector("#workers tbody");
    if (!body) return;
    body.textContent = "";
    var shown = active.concat(gone);
    if (!shown.length) {
      var empty = document.createElement("tr");
      var td = cell(empty, "none", "empty");
      td.colSpan = 7;
      body.appendChild(empty);
    }
    shown.forEach(function (w) {
      var row = document.createElement("tr");
      row.setAttribute("data-worker", w.worker_id);
      row.setAttribute("data-status", w.status);
      cell(row, w.worker_id);
      cell(row, w.hostname || "");
      var badge = document.createElement("span");
      badge.className = "state " + w.status;
      badge.textContent = w.status;
      var status = cell(row, "");
      status.appendChild(badge);
      if (w.status === "dead") {  // what its failover moved, and when
        var link = document.createElement("a");
        link.className = "failovers";
        link.href = "/dashboard/failovers?worker=" + encodeURIComponent(w.worker_id);
        link.textContent = "failovers";
        status.appendChild(document.createTextNode(" "));
        status.appendChild(link);
      }
      cell(row, w.running_jobs, "num");
      cell(row, w.queues.join(", "));
      cell(row, (w.heartbeat_age_seconds === null ? "-" : w.heartbeat_age_seconds.toFixed(1)) + " s", "num");
      cell(row, w.stopped_at ? w.stopped_at.replace("T", " ").slice(0, 19) : "-");
      body.appendChild(row);
    });
  }

  function frame(canvas) {
    var ctx = canvas.getContext("2d"), w = canvas.width, h = canvas.height;
    ctx.clearRect(0, 0, w, h);
    ctx.strokeStyle = "#d0d7de";
    ctx.beginPath(); ctx.moveTo(0, h - 0.5); ctx.lineTo(w, h - 0.5); ctx.stroke();
    ctx.fillStyle = "#57606a";
    ctx.font = "11px sans-serif";
    return ctx;
  }

  function lineChart(id, values, color) {
    var canvas = document.getElementById(id);
    if (!canvas || !canvas.getContext) return;
    var ctx = frame(canvas), w = canvas.width, h = canvas.height;
    var max = Math.max.apply(null, values.concat([1]));
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

  // One bar per minute, the newest on the right; the canvas keeps the series' sum in
  // data-total and its length in data-minutes (what a test or a person can check).
  function barChart(id, values, color) {
    var canvas = document.getElementById(id);
    if (!canvas || !canvas.getContext) return;
    var ctx = frame(canvas), w = canvas.width, h = canvas.height;
    var max = Math.max.apply(null, values.concat([1]));
    var total = values.reduce(function (a, b) { return a + b; }, 0);
    canvas.setAttribute("data-total", String(total));
    canvas.setAttribute("data-minutes", String(values.length));
    var step = (w - 2) / Math.max(values.length, 1);
    var base = h - 15;  // the bottom 15 px hold the time axis' labels
    ctx.clearRect(0, base, w, h - base);
    ctx.fillStyle = color;
    values.forEach(function (v, i) {
      var bar = (v / max) * (base - 18);
      ctx.fillRect(1 + i * step, base - bar, Math.max(step - 1, 1), bar);
    });
    ctx.fillStyle = "#57606a";
    ctx.fillText("max " + max + "/min · " + total + " in the hour", 4, 12);
    ctx.fillText("-60 min", 4, h - 3);
    ctx.fillText("now", w - 26, h - 3);
  }

  function drawMinutes() {
    barChart("chart-throughput", minutes.succeeded, "#1f6feb");
    barChart("chart-failures", minutes.dead, "#cf222e");
  }

  // Move the hour's window to ``minute`` (server time), adding empty minutes.
  function advanceTo(minute) {
    var last = minutes.start + minutes.succeeded.length - 1;
    for (var m = last + 1; m <= minute; m++) {
      minutes.succeeded.push(0);
      minutes.dead.push(0);
    }
    var extra = minutes.succeeded.length - 60;
    if (extra > 0) {
      minutes.succeeded.splice(0, extra);
      minutes.dead.splice(0, extra);
      minutes.start += extra;
    }
  }

  function addLive(metrics) {
    var totals = metrics.totals;
    advanceTo(Math.floor(metrics.at / 60));
    if (lastTotals) {
      var i = minutes.succeeded.length - 1;
      // A retried dead job leaves the dead count: never count a drop as negative work.
      minutes.succeeded[i] += Math.max((totals.succeeded || 0) - (lastTotals.succeeded || 0), 0);
      minutes.dead[i] += Math.max((totals.dead || 0) - (lastTotals.dead || 0), 0);
    }
    lastTotals = totals;
  }

  function resync() {
    getJSON("/admin/metrics/history?minutes=60").then(function (data) {
      var list = data.minutes;
      if (!list.length) return;
      minutes = {
        start: Math.floor(Date.parse(list[0].minute_at) / 60000),
        succeeded: list.map(function (m) { return m.succeeded; }),
        dead: list.map(function (m) { return m.dead; }),
      };
      drawMinutes();
    }).catch(function () { /* the live numbers go on; the next resync tries again */ });
  }

  function poll() {
    Promise.all([getJSON("/admin/queue/stats"), getJSON("/admin/metrics"),
                 getJSON("/admin/queue/workers?include_inactive=true")]).then(function (results) {
      var stats = results[0], metrics = results[1], workers = results[2];
      var seconds = lastAt === null ? null : metrics.at - lastAt;
      var queued = 0;
      Object.keys(metrics.queue_lengths).forEach(function (k) { queued += metrics.queue_lengths[k]; });
      depth.push(queued);
      if (depth.length > 90) depth.shift();
      addLive(metrics);
      renderQueues(stats, seconds);
      renderWorkers(workers);
      drawMinutes();
      lineChart("chart-depth", depth, "#bf8700");
      lastAt = metrics.at;
      overview.setAttribute("data-updated", String(metrics.at));
    }).catch(function (error) { if (!stopped) toast("live update failed: " + error.message, true); });
  }

  var refreshes = 0;
  function refreshCoordination() {
    var section = document.getElementById("coordination");
    if (!section) return;
    fetch("/dashboard/fragments/coordination", { credentials: "same-origin" })
      .then(checked).then(function (r) { return r.text(); })
      .then(function (html) {
        var holder = document.createElement("div");
        holder.innerHTML = html;  // rendered by the server with every value escaped
        var fresh = holder.firstElementChild;
        if (!fresh) return;
        refreshes += 1;
        fresh.setAttribute("data-refreshes", String(refreshes));
        section.replaceWith(fresh);
      }).catch(function (error) {
        if (!stopped) toast("coordination update failed: " + error.message, true);
      });
  }

  drawMinutes();
  poll();
  timers.push(setInterval(poll, 2000));
  timers.push(setInterval(refreshCoordination, 3000));
  timers.push(setInterval(resync, 60000));
})();

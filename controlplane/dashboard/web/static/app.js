// nixfleet dashboard (rfcs/0011): live regions, countdowns, action forms.
// No library; the pages work without this file, only not live.
(function () {
  'use strict';

  // span writes a duration like the server does: "4 min 12 s".
  function span(ms) {
    var s = Math.round(ms / 1000);
    if (s < 60) return s + ' s';
    if (s < 3600) return Math.floor(s / 60) + ' min' + (s % 60 ? ' ' + (s % 60) + ' s' : '');
    if (s < 86400) return Math.floor(s / 3600) + ' h ' + Math.floor((s % 3600) / 60) + ' min';
    return Math.floor(s / 86400) + ' d ' + Math.floor((s % 86400) / 3600) + ' h';
  }

  // Countdowns run on the server's clock: the page says what time it was
  // made, and the difference to this machine's clock is kept.
  var skew = 0;
  var serverNow = Date.parse(document.body.dataset.serverNow || '');
  if (!isNaN(serverNow)) skew = serverNow - Date.now();

  function countdowns() {
    var els = document.querySelectorAll('time[data-countdown]');
    for (var i = 0; i < els.length; i++) {
      var d = Date.parse(els[i].getAttribute('datetime')) - (Date.now() + skew);
      // Past its time a soak waits for its hosts' next check-in: the
      // page says so rather than "ends now" for ever.
      els[i].textContent = d <= 0 ? 'now; its hosts converge at their next check-in' : 'in ' + span(d);
    }
  }
  setInterval(countdowns, 1000);
  countdowns();

  // Opening an action focuses its comment field.
  document.addEventListener('toggle', function (e) {
    var d = e.target;
    if (d.matches && d.matches('details.action') && d.open) {
      var c = d.querySelector('input[name=comment]');
      if (c) c.focus();
    }
  }, true);

  // The comment's limit is 500 bytes, as the server counts, not characters.
  document.addEventListener('submit', function (e) {
    var c = e.target.querySelector && e.target.querySelector('input[name=comment]');
    if (!c) return;
    var bytes = new TextEncoder().encode(c.value).length;
    c.setCustomValidity(bytes > 500 ? 'At most 500 bytes (this is ' + bytes + ').' : '');
    if (bytes > 500) { e.preventDefault(); c.reportValidity(); }
  }, true);
  document.addEventListener('input', function (e) {
    if (e.target.name === 'comment') e.target.setCustomValidity('');
  }, true);

  var body = document.body;
  var status = document.getElementById('live-status');
  function say(text, cls) {
    if (!status) return;
    status.textContent = text;
    status.className = 'live-status ' + (cls || '');
  }
  if (body.dataset.stream === undefined) return;

  var es = null, ended = false;
  function signedOut() {
    ended = true;
    if (es) es.close();
    say('Your session has ended: run nixfleet ui to sign in again.', 'st-bad');
    body.classList.add('signed-out');
  }

  // A region is left alone while someone is in it: an open action, or the
  // focus on anything inside it. It is refreshed when they leave.
  function inUse(region) {
    if (region.querySelector('details[open]')) return true;
    var a = document.activeElement;
    return a && a !== body && region.contains(a);
  }

  var refreshing = false, again = false, stale = false, skipped = false, last = 0, took = 0, timer = null;
  function refresh() {
    if (refreshing) { again = true; return; }
    refreshing = true;
    last = Date.now();
    fetch(location.href, { credentials: 'same-origin', headers: { 'Accept': 'text/html' } }).then(function (res) {
      if (res.status === 401) { signedOut(); return null; }
      if (!res.ok) { say('Could not refresh (HTTP ' + res.status + '); retrying on the next event.', 'st-wait'); return null; }
      return res.text();
    }).then(function (html) {
      if (html == null) return;
      var doc = new DOMParser().parseFromString(html, 'text/html');
      var regions = document.querySelectorAll('[data-live]');
      skipped = false;
      for (var i = 0; i < regions.length; i++) {
        var fresh = doc.getElementById(regions[i].id);
        if (!fresh) continue;
        if (inUse(regions[i])) { skipped = true; continue; }
        regions[i].innerHTML = fresh.innerHTML;
      }
      countdowns();
      body.dataset.refreshed = String(Number(body.dataset.refreshed || 0) + 1);
    }).catch(function () {
      say('Could not refresh; retrying on the next event.', 'st-wait');
    }).then(function () {
      took = Date.now() - last;
      refreshing = false;
      if (again) { again = false; schedule(); }
    });
  }

  // schedule refreshes at most once a second however many events come
  // (less often for a page that takes long to make: a tenth of the time
  // at most goes to refreshing), and not at all while the tab is hidden
  // (once when it shows again).
  function schedule() {
    if (ended) return;
    if (document.hidden) { stale = true; return; }
    if (timer) return;
    var gap = Math.max(1000, 10 * took);
    timer = setTimeout(function () { timer = null; refresh(); }, Math.max(0, gap - (Date.now() - last)));
  }
  document.addEventListener('visibilitychange', function () {
    if (!document.hidden && stale) { stale = false; schedule(); }
  });
  // Leaving a region that was skipped refreshes it.
  function left() { if (skipped) setTimeout(schedule, 0); }
  document.addEventListener('focusout', left);
  document.addEventListener('toggle', left, true);

  // The stream resumes after the last event it delivered: the browser
  // sends Last-Event-ID when it reconnects by itself; after a refusal
  // (rate limit, a replica going away) the page opens it again, later.
  var lastId = body.dataset.after || '0', backoff = 2000;
  function connect() {
    var q = body.dataset.stream;
    es = new EventSource('/ui/events?' + (q ? q + '&' : '') + 'after=' + encodeURIComponent(lastId));
    es.onopen = function () { backoff = 2000; say('Live', 'st-ok'); };
    function onEvent(e) { if (e.lastEventId) lastId = e.lastEventId; schedule(); }
    es.addEventListener('journal', onEvent);
    es.addEventListener('resync', onEvent);
    es.addEventListener('signed-out', signedOut);
    es.onerror = function () {
      if (es.readyState !== EventSource.CLOSED) { say('Reconnecting…', 'st-wait'); return; }
      fetch(location.href, { credentials: 'same-origin' }).then(function (res) {
        if (res.status === 401) { signedOut(); return; }
        say('Reconnecting…', 'st-wait');
        setTimeout(connect, backoff);
        backoff = Math.min(backoff * 2, 60000);
      }, function () {
        say('Disconnected; reconnecting…', 'st-bad');
        setTimeout(connect, backoff);
        backoff = Math.min(backoff * 2, 60000);
      });
    };
  }
  connect();
})();

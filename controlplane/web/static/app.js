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
      els[i].textContent = d <= 0 ? 'now' : 'in ' + span(d);
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

  var body = document.body;
  var status = document.getElementById('live-status');
  function say(text, cls) {
    if (!status) return;
    status.textContent = text;
    status.className = 'live-status ' + (cls || '');
  }
  if (body.dataset.stream === undefined) return;

  function signedOut() {
    say('Your session has ended: run nixfleet ui to sign in again.', 'st-bad');
    body.classList.add('signed-out');
  }

  // A region is left alone while someone is using it: an open action,
  // or the focus in a field.
  function inUse(region) {
    if (region.querySelector('details[open]')) return true;
    var a = document.activeElement;
    return a && region.contains(a) && a.matches('input, textarea, select');
  }

  var refreshing = false, again = false, stale = false, last = 0, took = 0, timer = null;
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
      var focused = document.activeElement && document.activeElement.id;
      var regions = document.querySelectorAll('[data-live]');
      for (var i = 0; i < regions.length; i++) {
        var fresh = doc.getElementById(regions[i].id);
        if (fresh && !inUse(regions[i])) regions[i].innerHTML = fresh.innerHTML;
      }
      if (focused && document.getElementById(focused)) document.getElementById(focused).focus();
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
    if (document.hidden) { stale = true; return; }
    if (timer) return;
    var gap = Math.max(1000, 10 * took);
    timer = setTimeout(function () { timer = null; refresh(); }, Math.max(0, gap - (Date.now() - last)));
  }
  document.addEventListener('visibilitychange', function () {
    if (!document.hidden && stale) { stale = false; schedule(); }
  });

  var q = body.dataset.stream;
  var es = new EventSource('/ui/events?' + (q ? q + '&' : '') + 'after=' + encodeURIComponent(body.dataset.after || '0'));
  es.onopen = function () { say('Live', 'st-ok'); };
  es.addEventListener('journal', schedule);
  es.addEventListener('signed-out', function () { es.close(); signedOut(); });
  es.onerror = function () {
    if (es.readyState === EventSource.CLOSED) {
      // Refused (the session ended, or the server is gone): ask the page.
      fetch(location.href, { credentials: 'same-origin' }).then(function (res) {
        if (res.status === 401) signedOut(); else say('Disconnected; reload the page.', 'st-bad');
      }, function () { say('Disconnected; reload the page.', 'st-bad'); });
    } else {
      say('Reconnecting…', 'st-wait');
    }
  };
})();

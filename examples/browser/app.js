// Queen through queen-edge from a browser: push, long-poll pop, ack, following the seed's client
// rules (using-queen-over-http.md, "Writing your own client"). No framework, no build step.

const $ = (id) => document.getElementById(id);

/** A refusal that cannot resolve itself (403, network/CORS error): the flow stops here. */
class Stop extends Error {}

const MAX_ATTEMPTS = 10;
const BACKOFF_START_MS = 500;
const BACKOFF_CAP_MS = 30_000;
/** Client-side slack over the server-side long-poll window, so the server's timeout fires first. */
const LONG_POLL_SLACK_MS = 5000;

let runAbort = null;
let holdAbort = null;
let stepNo = 0;
let runNo = 0;

function settings() {
  return {
    proxy: $('proxy').value.trim().replace(/\/+$/, ''),
    token: $('token').value.trim(),
    queue: $('queue').value.trim() || 'browser-demo',
    group: $('group').value.trim() || 'web',
    timeoutMs: Number($('timeout').value) || 10000,
  };
}

function setResult(state, text) {
  const el = $('result');
  el.className = state;
  el.dataset.state = state;
  el.textContent = text;
}

function addRunHeading(text) {
  const tr = document.createElement('tr');
  tr.className = 'run';
  tr.innerHTML = '<td colspan="7"></td>';
  tr.firstChild.textContent = text;
  $('steps').append(tr);
}

/** One row of the steps table; returned setters fill it in as the request progresses. */
function addRow(step) {
  const tr = document.createElement('tr');
  tr.dataset.step = step;
  tr.innerHTML = `<td>${++stepNo}</td><td></td><td class="status">…</td><td class="retry-after"></td><td class="ratelimit"></td><td class="proto"></td><td class="detail"></td>`;
  tr.children[1].textContent = step;
  $('steps').append(tr);
  const cell = (cls) => tr.querySelector(`.${cls}`);
  return {
    response(res, protocol) {
      const s = cell('status');
      s.textContent = String(res.status);
      s.classList.add(res.status === 429 ? 's429' : `s${String(res.status)[0]}`);
      tr.dataset.status = String(res.status);
      // Readable only because the edge lists them in Access-Control-Expose-Headers.
      cell('retry-after').textContent = res.headers.get('Retry-After') ?? '';
      cell('ratelimit').textContent = res.headers.get('RateLimit') ?? '';
      cell('proto').textContent = protocol;
      tr.dataset.protocol = protocol;
    },
    networkError(message) {
      const s = cell('status');
      s.textContent = 'network error';
      s.classList.add('neterr');
      tr.dataset.status = 'network-error';
      cell('detail').textContent = message;
    },
    detail(text) {
      cell('detail').textContent = text;
    },
  };
}

/**
 * The protocol (h2, http/1.1) of each finished fetch, per URL in completion order, from Resource
 * Timing. A cross-origin entry carries nextHopProtocol only when the response has Timing-Allow-Origin.
 */
const protocols = new Map();
new PerformanceObserver((list) => {
  for (const entry of list.getEntries()) {
    if (!protocols.has(entry.name)) protocols.set(entry.name, []);
    protocols.get(entry.name).push(entry.nextHopProtocol || 'hidden');
  }
}).observe({ type: 'resource', buffered: true });
const finishedCount = (url) => protocols.get(url)?.length ?? 0;

/** The protocol of the fetch of `url` that finished after `before` others; its entry lands a little after the body. */
async function protocolOf(url, before) {
  for (let i = 0; i < 100 && finishedCount(url) <= before; i++) await sleep(10);
  return protocols.get(url)?.[before] ?? '?';
}

const sleep = (ms, signal) =>
  new Promise((resolve, reject) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener(
      'abort',
      () => {
        clearTimeout(t);
        reject(signal.reason);
      },
      { once: true },
    );
  });

/** Seconds from Retry-After; otherwise exponential backoff from 500 ms, capped at 30 s, with jitter. */
function backoffMs(res, attempt) {
  const retryAfter = Number(res.headers.get('Retry-After'));
  if (Number.isFinite(retryAfter) && retryAfter >= 0) return retryAfter * 1000 + Math.random() * 100;
  const base = Math.min(BACKOFF_CAP_MS, BACKOFF_START_MS * 2 ** (attempt - 1));
  return base / 2 + Math.random() * (base / 2);
}

/**
 * One API call with the seed's rules: 429 retried in place after Retry-After (at most ten attempts,
 * unbounded for a long poll), 403 stops, 204 is returned without touching the body.
 */
async function call(cfg, step, method, path, { body, longPollMs, signal } = {}) {
  const url = `${cfg.proxy}${path}`;
  for (let attempt = 1; ; attempt++) {
    const row = addRow(attempt === 1 ? step : `${step} (retry ${attempt - 1})`);
    const timeout = longPollMs === undefined ? null : AbortSignal.timeout(longPollMs + LONG_POLL_SLACK_MS);
    const before = finishedCount(url);
    let res;
    try {
      res = await fetch(url, {
        method,
        headers: { Authorization: `Bearer ${cfg.token}`, ...(body === undefined ? {} : { 'Content-Type': 'application/json' }) },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: timeout && signal ? AbortSignal.any([timeout, signal]) : (timeout ?? signal),
      });
    } catch (err) {
      if (signal?.aborted) throw signal.reason;
      // A CORS refusal looks exactly like this: the browser hides the response from the page.
      // The first cause on a fresh demo is the self-signed certificate: say how to accept it.
      const health = `${new URL(url).origin}/health`;
      row.networkError(
        `${err.name}: ${err.message}. A self-signed certificate (npm run demo)? Open ${health} in a new tab, accept the certificate, then run again. ` +
          "Otherwise: this origin is not allowed (the tenant's CORS origins) or the proxy is down.",
      );
      throw new Stop(`${step}: network error`);
    }
    // 204 = no messages: never parse it.
    const json = res.status === 204 ? null : await res.json().catch(() => null);
    row.response(res, await protocolOf(url, before));
    if (res.status === 429) {
      if (longPollMs === undefined && attempt >= MAX_ATTEMPTS) throw new Stop(`${step}: still rate limited after ${attempt} attempts`);
      const wait = backoffMs(res, attempt);
      row.detail(`${json?.code ?? 'rate limited'}: waiting ${(wait / 1000).toFixed(1)} s, then retrying in place`);
      await sleep(wait, signal);
      continue;
    }
    if (res.status === 403) {
      row.detail(`${json?.code ?? 'forbidden'}: stopping (this cannot resolve itself)`);
      throw new Stop(`${step}: 403 ${json?.code ?? ''}`);
    }
    if (!res.ok) {
      row.detail(`${json?.code ?? ''} ${json?.error ?? ''}`.trim());
      throw new Stop(`${step}: HTTP ${res.status}`);
    }
    return { status: res.status, json, row };
  }
}

async function run() {
  const cfg = settings();
  if (!cfg.proxy || !cfg.token) return setResult('error', 'Proxy URL and token are required.');
  runAbort = new AbortController();
  const signal = runAbort.signal;
  $('run').disabled = true;
  $('stop').disabled = false;
  setResult('busy', 'Running…');
  addRunHeading(`Run ${++runNo} · ${cfg.proxy} · ${$('held').textContent}`);
  // Fixed for this run, so a push retried after a 429 is deduplicated rather than doubled.
  const transactionId = `web-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
  const q = encodeURIComponent(cfg.queue);
  const group = encodeURIComponent(cfg.group);
  try {
    // 1. Push: 201 carries a verdict per item; check each one and the count.
    const push = await call(cfg, 'push', 'POST', '/api/v1/push', {
      body: { items: [{ queue: cfg.queue, transactionId, payload: { from: location.origin, at: new Date().toISOString() } }] },
      signal,
    });
    const items = Array.isArray(push.json) ? push.json : [];
    if (items.length !== 1) throw new Stop(`push: expected 1 item verdict, got ${items.length}`);
    const verdict = items[0].status;
    push.row.detail(`item ${verdict}${verdict === 'duplicate' ? ' (already stored)' : ''}`);
    if (verdict === 'failed') throw new Stop('push: the broker lost the message (status failed)');

    // 2. Long-poll until the message arrives; a 204 is "nothing yet", poll again.
    let pop;
    for (;;) {
      pop = await call(cfg, 'pop (wait=true)', 'GET', `/api/v1/pop/queue/${q}?consumerGroup=${group}&batch=1&wait=true&timeout=${cfg.timeoutMs}`, {
        longPollMs: cfg.timeoutMs,
        signal,
      });
      if (pop.status === 204) pop.row.detail('no messages yet, polling again');
      else break;
    }
    const message = pop.json.messages[0];
    pop.row.detail(`got ${message.transactionId}: ${JSON.stringify(message.data)}`);

    // 3. Ack: 200 whatever the outcome; success is per item.
    const ack = await call(cfg, 'ack', 'POST', '/api/v1/ack', {
      body: {
        transactionId: message.transactionId,
        partitionId: message.partitionId,
        leaseId: pop.json.leaseId,
        consumerGroup: cfg.group,
        status: 'completed',
      },
      signal,
    });
    const acks = Array.isArray(ack.json) ? ack.json : [];
    if (acks.length !== 1 || acks[0].success !== true) {
      ack.row.detail(`not acked: ${acks[0]?.error ?? 'unexpected response'}`);
      throw new Stop('ack: the broker did not accept the ack');
    }
    ack.row.detail('acked');
    setResult('ok', `Done: pushed, long-polled and acked ${message.transactionId}.`);
  } catch (err) {
    setResult('error', signal.aborted ? 'Stopped.' : `Stopped: ${err.message}`);
  } finally {
    $('run').disabled = false;
    $('stop').disabled = true;
    runAbort = null;
  }
}

/** Opens N long polls on their own queues and keeps them open until released (a page with many consumers). */
function hold() {
  const cfg = settings();
  if (!cfg.proxy || !cfg.token) return setResult('error', 'Proxy URL and token are required.');
  const n = Math.max(1, Math.min(50, Number($('count').value) || 10));
  holdAbort = new AbortController();
  const { signal } = holdAbort;
  const group = encodeURIComponent(cfg.group);
  let open = 0;
  const show = () => {
    $('held').dataset.count = String(open);
    $('held').textContent = open === 0 ? 'No extra long polls open.' : `${open} extra long polls open.`;
  };
  const poll = async (i) => {
    const url = `${cfg.proxy}/api/v1/pop/queue/${encodeURIComponent(`${cfg.queue}-idle-${i}`)}?consumerGroup=${group}&wait=true&timeout=${cfg.timeoutMs}`;
    open++;
    show();
    try {
      while (!signal.aborted) {
        const res = await fetch(url, { headers: { Authorization: `Bearer ${cfg.token}` }, signal });
        // 204: the window passed with nothing, poll again. 429: back off. Anything else ends this poll.
        if (res.status === 429) await sleep(backoffMs(res, 1), signal);
        else if (res.status !== 204) break;
      }
    } catch {
      // Aborted by "Release", or a network error: either way this poll is over.
    } finally {
      open--;
      show();
    }
  };
  for (let i = 0; i < n; i++) poll(i);
  $('hold').disabled = true;
  $('release').disabled = false;
}

function release() {
  holdAbort?.abort();
  holdAbort = null;
  $('hold').disabled = false;
  $('release').disabled = true;
}

$('run').addEventListener('click', run);
$('stop').addEventListener('click', () => runAbort?.abort());
$('hold').addEventListener('click', hold);
$('release').addEventListener('click', release);

// `#proxy=...&token=...` fills the connection fields (npm run demo prints such a link); a fragment never reaches a server.
const prefill = new URLSearchParams(location.hash.slice(1));
for (const id of ['proxy', 'token']) if (prefill.get(id)) $(id).value = prefill.get(id);

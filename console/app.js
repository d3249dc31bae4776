// The queen-edge operator console: a single page over the admin API (docs/console.md).
// Plain ES module, no build step. The admin token lives in sessionStorage (this tab only) and
// travels only in the Authorization header; pages are built with DOM calls (no HTML strings), so
// tenant ids, hosts and broker URLs can never inject markup.
import uPlot from './vendor/uPlot.esm.js';

const TOKEN_KEY = 'queen-edge-admin-token';
const OVERVIEW_REFRESH_MS = 3000;
const TENANTS_REFRESH_MS = 5000;
/** Tenants per page of the Tenants table (the admin API lists them in pages, docs/operating.md). */
const TENANTS_PAGE = 50;
/** Tenants per page of the Brokers page: each is a panel with its ring's table. */
const BROKERS_PAGE = 20;
const HOUR = 3600_000;

/** uPlot instances of the tenant page, by chart name (the browser test reads their data). */
window.qeCharts = {};

// ---------- small helpers ----------

function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) if (c !== null && c !== undefined && c !== false) el.append(c instanceof Node ? c : String(c));
  return el;
}

const nf = new Intl.NumberFormat('en-US');
const nf1 = new Intl.NumberFormat('en-US', { maximumFractionDigits: 1 });
const nf2 = new Intl.NumberFormat('en-US', { maximumFractionDigits: 2 });
const num = (n) => nf.format(n);
const rate = (n, unit) => (n === null || n === undefined ? '—' : `${nf1.format(n)} ${unit}`);

function bytes(n) {
  if (n === null || n === undefined) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${i === 0 ? nf.format(v) : nf1.format(v)} ${units[i]}`;
}

function utc(iso) {
  if (!iso) return '—';
  const d = typeof iso === 'number' ? new Date(iso) : new Date(iso);
  return `${d.toISOString().slice(0, 19).replace('T', ' ')} UTC`;
}

function badge(text, kind) {
  return h('span', { class: `badge ${kind}` }, text);
}

/** "used of quota" with a bar; a quota of 0 is unlimited. */
function meter(used, quota, fmt) {
  if (!quota) return h('div', { class: 'meter' }, h('span', { class: 'txt' }, `${fmt(used)} `, h('span', { class: 'muted' }, 'of unlimited')));
  const pct = Math.min(100, (100 * used) / quota);
  return h(
    'div',
    { class: `meter${pct >= 90 ? ' high' : ''}` },
    h('span', { class: 'txt' }, `${fmt(used)} `, h('span', { class: 'muted' }, `of ${fmt(quota)} (${nf1.format(pct)} %)`)),
    h('div', { class: 'bar', role: 'img', 'aria-label': `${nf1.format(pct)} percent of quota` }, h('span', { 'data-pct': pct })),
  );
}

// Bars get their width from script, never from an inline style attribute (the CSP forbids those).
function sizeBars(root) {
  for (const s of root.querySelectorAll('[data-pct]')) s.style.width = `${s.dataset.pct}%`;
}

// ---------- the admin API ----------

class Unauthorized extends Error {}

async function api(method, path) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (!token) throw new Unauthorized('not signed in');
  const res = await fetch(path, { method, headers: { authorization: `Bearer ${token}` }, cache: 'no-store', credentials: 'omit' });
  if (res.status === 401) throw new Unauthorized('token refused');
  const text = await res.text();
  const doc = text ? JSON.parse(text) : null;
  if (!res.ok) throw new Error(`${res.status} ${doc?.code ?? ''}: ${doc?.error ?? text}`);
  return doc;
}

/** A write with a JSON body (PUT, POST) or none (DELETE); the answer's JSON, or null for a 204. */
async function apiSend(method, path, body) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const headers = { authorization: `Bearer ${token}` };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(path, { method, headers, body, cache: 'no-store', credentials: 'omit' });
  if (res.status === 401) throw new Unauthorized('token refused');
  const text = await res.text();
  const doc = text ? JSON.parse(text) : null;
  if (!res.ok) throw new Error(`${res.status} ${doc?.code ?? ''}: ${(doc?.problems ?? [doc?.error ?? text]).join('; ')}`);
  return doc;
}

// ---------- shell: login, navigation, timers ----------

const view = document.getElementById('view');
let timers = [];
let generation = 0;

function every(msInterval, fn) {
  timers.push(setInterval(fn, msInterval));
}

function stopTimers() {
  for (const t of timers) clearInterval(t);
  timers = [];
}

function showLogin(message = '') {
  stopTimers();
  sessionStorage.removeItem(TOKEN_KEY);
  view.replaceChildren();
  document.getElementById('nav').hidden = true;
  document.getElementById('logout').hidden = true;
  document.getElementById('login').hidden = false;
  document.getElementById('login-error').textContent = message;
  document.getElementById('token').value = '';
  document.getElementById('token').focus();
}

document.getElementById('login-form').addEventListener('submit', async (e) => {
  e.preventDefault();
  const input = document.getElementById('token');
  sessionStorage.setItem(TOKEN_KEY, input.value.trim());
  input.value = '';
  try {
    await api('GET', '/admin/v1/stats');
  } catch (err) {
    showLogin(err instanceof Unauthorized ? 'The admin API refused this token (401).' : `Cannot reach the admin API: ${err.message}`);
    return;
  }
  document.getElementById('login').hidden = true;
  if (!location.hash || location.hash === '#/') location.hash = '#/overview';
  else route();
});

document.getElementById('logout').addEventListener('click', () => showLogin('Signed out.'));

function confirmDialog(title, text, okLabel) {
  const dlg = document.getElementById('confirm');
  document.getElementById('confirm-title').textContent = title;
  document.getElementById('confirm-text').textContent = text;
  document.getElementById('confirm-ok').textContent = okLabel;
  dlg.returnValue = '';
  dlg.showModal();
  return new Promise((resolve) => dlg.addEventListener('close', () => resolve(dlg.returnValue === 'ok'), { once: true }));
}

function page(title, subtitle, ...content) {
  view.replaceChildren(h('h1', {}, title), h('p', { class: 'sub' }, subtitle), ...content);
  sizeBars(view);
}

function failed(err) {
  if (err instanceof Unauthorized) showLogin('The admin API refused the token (401). Sign in again.');
  else view.append(h('p', { class: 'error', role: 'alert' }, `Could not load: ${err.message}`));
}

const PAGES = {
  overview: renderOverview,
  tenants: renderTenants,
  tenant: renderTenant,
  brokers: renderBrokers,
  plans: renderPlans,
};

async function route() {
  stopTimers();
  const gen = ++generation;
  if (!sessionStorage.getItem(TOKEN_KEY)) return showLogin();
  document.getElementById('login').hidden = true;
  document.getElementById('nav').hidden = false;
  document.getElementById('logout').hidden = false;
  const [, name = 'overview', arg] = location.hash.split('/');
  const key = name === 'tenants' && arg ? 'tenant' : PAGES[name] ? name : 'overview';
  for (const a of document.querySelectorAll('#nav a')) {
    if (a.dataset.page === (key === 'tenant' ? 'tenants' : key)) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  view.replaceChildren(h('p', { class: 'muted' }, 'Loading…'));
  try {
    await PAGES[key](decodeURIComponent(arg ?? ''), () => gen === generation);
  } catch (err) {
    if (gen === generation) failed(err);
  }
}

window.addEventListener('hashchange', route);

// ---------- Overview ----------

function card(label, value, unit, note) {
  return h(
    'div',
    { class: 'card' },
    h('div', { class: 'label' }, label),
    h('div', { class: 'value' }, value, unit ? h('small', {}, unit) : null),
    note ? h('div', { class: 'note' }, note) : null,
  );
}

async function renderOverview(_arg, current) {
  const draw = (s) => {
    const modes = Object.keys(s.redis.limiterModes);
    const redisValue = !s.redis.configured ? 'none' : modes.length === 1 ? (modes[0] === 'redis' ? 'connected' : `away: ${modes[0]}`) : 'mixed';
    const redisNote = s.redis.configured
      ? `limiter ${Object.entries(s.redis.limiterModes)
          .map(([m, n]) => `${m} ×${n}`)
          .join(', ')}; fail mode ${s.redis.failMode}; ${num(s.redis.errorsTotal)} client errors`
      : 'in-memory limits and usage, one instance';
    const window = s.windowSeconds === null ? 'measuring: the next refresh shows rates' : `over the last ${nf1.format(s.windowSeconds)} s`;
    const refusals = Object.entries(s.refusals.total).sort((a, b) => b[1] - a[1]);
    const down = s.brokers.filter((b) => !b.up).length;
    page(
      'Overview',
      h(
        'span',
        {},
        `Live, all workers of this instance; refreshed every ${OVERVIEW_REFRESH_MS / 1000} s. `,
        h('span', { class: 'updated', id: 'updated' }, `Updated ${utc(s.at)}.`),
      ),
      h(
        'div',
        { class: 'cards four' },
        card('Request rate', s.requests.perSecond === null ? '—' : nf1.format(s.requests.perSecond), 'req/s', window),
        card('Added latency p50', s.addedLatencyMs.p50 === null ? '—' : nf2.format(s.addedLatencyMs.p50), 'ms', 'time spent in the edge'),
        card('Added latency p99', s.addedLatencyMs.p99 === null ? '—' : nf2.format(s.addedLatencyMs.p99), 'ms', 'time spent in the edge'),
        card('Parked polls', num(s.parkedPolls), 'polls', 'wait=true pops at brokers now'),
        card('Workers alive', num(s.workers), s.workers === 1 ? 'process' : 'processes', 'serving this admin listener'),
        card('Redis', redisValue, '', redisNote),
        card('Brokers', `${num(s.brokers.length - down)} / ${num(s.brokers.length)}`, 'healthy', down ? `${down} down` : 'all healthy'),
        card('Metering lag', nf1.format(s.metering.flushLagSeconds), 's', 'oldest usage not yet flushed'),
      ),
      h(
        'div',
        { class: 'grid2' },
        h(
          'div',
          { class: 'panel' },
          h('h2', {}, 'Refusals by code'),
          h(
            'table',
            { id: 'refusals' },
            h('thead', {}, h('tr', {}, h('th', {}, 'Code'), h('th', { class: 'num' }, 'Since start'), h('th', { class: 'num' }, 'Rate'))),
            h(
              'tbody',
              {},
              refusals.length === 0
                ? h('tr', {}, h('td', { colspan: 3, class: 'empty' }, 'No refusals since start.'))
                : refusals.map(([code, n]) =>
                    h(
                      'tr',
                      {},
                      h('td', {}, h('code', {}, code)),
                      h('td', { class: 'num' }, `${num(n)} req`),
                      h('td', { class: 'num' }, rate(s.refusals.perSecond?.[code] ?? null, 'req/s')),
                    ),
                  ),
            ),
          ),
        ),
        h(
          'div',
          { class: 'panel' },
          h('h2', {}, 'Broker health'),
          h(
            'table',
            { id: 'broker-health' },
            h('thead', {}, h('tr', {}, h('th', {}, 'Broker'), h('th', {}, 'Health'), h('th', { class: 'num' }, 'In flight'))),
            h(
              'tbody',
              {},
              s.brokers.length === 0
                ? h('tr', {}, h('td', { colspan: 3, class: 'empty' }, 'No brokers.'))
                : s.brokers.map((b) =>
                    h(
                      'tr',
                      {},
                      h('td', {}, h('code', {}, b.url)),
                      h('td', {}, b.up ? badge('up', 'ok') : badge('down', 'bad')),
                      h('td', { class: 'num' }, `${num(b.inflight)} req`),
                    ),
                  ),
            ),
          ),
        ),
      ),
    );
  };
  draw(await api('GET', '/admin/v1/stats'));
  every(OVERVIEW_REFRESH_MS, async () => {
    try {
      const s = await api('GET', '/admin/v1/stats');
      if (current()) draw(s);
    } catch (err) {
      if (current()) failed(err);
    }
  });
}

// ---------- Paged listings (Tenants, Brokers) ----------

/**
 * A listing's query: `limit`, the filters set in `state` and the cursor of the page shown. The
 * admin API pages over the tenants in id order (docs/operating.md), so a page costs the same
 * whatever the directory holds.
 */
function pageQuery(state, limit) {
  const q = new URLSearchParams({ limit: String(limit) });
  for (const k of ['prefix', 'status', 'plan']) if (state[k]) q.set(k, state[k]);
  const cursor = state.cursors.at(-1);
  if (cursor) q.set('cursor', cursor);
  return q;
}

/**
 * The search form above a listing: id or host prefix, then `selects` ([key, label, options]);
 * a search starts again from page one.
 */
function listSearch(name, state, selects = []) {
  return h(
    'form',
    {
      id: `${name}-search`,
      class: 'search',
      role: 'search',
      onsubmit: (e) => {
        e.preventDefault();
        state.prefix = document.getElementById(`${name}-prefix`).value.trim();
        for (const [key] of selects) state[key] = document.getElementById(`${name}-${key}`).value;
        state.cursors = [''];
        route();
      },
    },
    h(
      'label',
      {},
      'Id or host starts with ',
      h('input', { id: `${name}-prefix`, type: 'search', value: state.prefix, spellcheck: 'false', autocomplete: 'off' }),
    ),
    selects.map(([key, label, options]) =>
      h(
        'label',
        {},
        `${label} `,
        h(
          'select',
          { id: `${name}-${key}` },
          options.map(([v, text]) => h('option', { value: v, selected: v === state[key] }, text)),
        ),
      ),
    ),
    h('button', { type: 'submit', class: 'primary' }, 'Search'),
  );
}

/** Previous / Next under a listing; `next` is the API's cursor of the following page. */
function pager(name, state, next, shown) {
  const n = state.cursors.length;
  return h(
    'div',
    { class: 'pager' },
    h(
      'button',
      {
        type: 'button',
        id: `${name}-prev`,
        disabled: n === 1,
        onclick: () => {
          state.cursors.pop();
          route();
        },
      },
      '← Previous',
    ),
    h('span', { class: 'muted', id: `${name}-page` }, `Page ${num(n)}: ${num(shown)} tenant${shown === 1 ? '' : 's'}`),
    h(
      'button',
      {
        type: 'button',
        id: `${name}-next`,
        disabled: !next,
        onclick: () => {
          state.cursors.push(next);
          route();
        },
      },
      'Next →',
    ),
  );
}

// ---------- Tenants ----------

/**
 * The Tenants page's search and position, kept while the operator moves between pages of the
 * console: the filters, and the cursor of every page up to the one shown (Previous pops one).
 */
const tenantsView = { prefix: '', status: '', plan: '', cursors: [''] };

/** The search form above the table: id or host prefix, status, plan. */
function tenantsSearch(plans) {
  return listSearch('tenants', tenantsView, [
    [
      'status',
      'Status',
      [
        ['', 'any'],
        ['active', 'active'],
        ['suspended', 'suspended'],
      ],
    ],
    ['plan', 'Plan', [['', 'any'], ...plans.map((p) => [p.id, p.id])]],
  ]);
}

async function renderTenants(_arg, current) {
  const q = pageQuery(tenantsView, TENANTS_PAGE);
  const [{ tenants, next, total }, { plans, writable, backing }, stats, monthUsage] = await Promise.all([
    api('GET', `/admin/v1/tenants?${q}`),
    api('GET', '/admin/v1/plans'),
    api('GET', '/admin/v1/stats'),
    // The same page's tenants: the usage API pages as the tenant list does.
    api('GET', `/admin/v1/usage?${q}`),
  ]);
  const planById = new Map(plans.map((p) => [p.id, p]));
  const totals = new Map(monthUsage.tenants.map((u) => [u.tenant, u.total]));
  // A tenant created between the two reads has no usage yet.
  const usage = tenants.map((t) => totals.get(t.id) ?? { messagesPushed: 0, ingressBytes: 0 });
  const filtered = Boolean(tenantsView.prefix || tenantsView.status || tenantsView.plan);
  const month = new Date().toISOString().slice(0, 7);

  const rateCell = (kind, id, limit, unit) => h('td', { class: 'num', 'data-rate': kind, 'data-tenant': id, 'data-limit': limit, 'data-unit': unit }, '—');
  const fillRates = (s) => {
    for (const td of view.querySelectorAll('td[data-rate]')) {
      const per = s.tenants[td.dataset.rate === 'req' ? 'requestsPerSecond' : 'messagesPerSecond'];
      // Past metrics.tenantLabels' slots a tenant is counted under _other: no rate of its own.
      const unlabelled = per && !(td.dataset.tenant in per) && '_other' in per;
      const v = per ? (per[td.dataset.tenant] ?? 0) : null;
      td.title = unlabelled ? 'No metrics label of its own (metrics.tenantLabels): its rate is in _other' : '';
      td.textContent = v === null ? 'measuring…' : unlabelled ? '—' : `${nf1.format(v)} of ${num(Number(td.dataset.limit))} ${td.dataset.unit}`;
    }
  };

  const row = (t, u) => {
    const plan = planById.get(t.plan);
    const suspended = t.status === 'suspended';
    const overridden = t.source?.overridden === true;
    const path = `/admin/v1/tenants/${encodeURIComponent(t.id)}`;
    const action = () =>
      change(
        suspended ? 'resume' : 'suspend',
        'POST',
        `${path}/${suspended ? 'resume' : 'suspend'}`,
        `${suspended ? 'Resume' : 'Suspend'} tenant ${t.id}?`,
        suspended
          ? `Its clients are served again within a second.`
          : `Every request of its clients is refused with 403 cluster_suspended until it is resumed. Parked polls already at a broker finish.`,
        suspended ? 'Resume' : 'Suspend',
      );
    const reset = () =>
      change(
        'reset',
        'DELETE',
        `${path}/overrides`,
        `Reset tenant ${t.id} to the config file?`,
        "The admin API's changes to this tenant (suspend, resume, a replaced record) are dropped: the config file's entry applies again.",
        'Reset',
      );
    const change = async (verb, method, target, title, text, confirmLabel) => {
      if (!(await confirmDialog(title, text, confirmLabel))) return;
      try {
        const updated = await api(method, target);
        const tr = view.querySelector(`tr[data-tenant="${CSS.escape(t.id)}"]`);
        tr.replaceWith(row(updated, u));
        sizeBars(view);
        fillRates(await api('GET', '/admin/v1/stats'));
        view.querySelector(`tr[data-tenant="${CSS.escape(t.id)}"] button`)?.focus();
      } catch (err) {
        if (err instanceof Unauthorized) return failed(err);
        document.getElementById('tenants-error').textContent = `Could not ${verb} ${t.id}: ${err.message}`;
      }
    };
    return h(
      'tr',
      { 'data-tenant': t.id, 'data-status': t.status },
      h('td', {}, h('a', { href: `#/tenants/${encodeURIComponent(t.id)}` }, t.id)),
      h(
        'td',
        { class: 'status' },
        suspended ? badge('suspended', 'bad') : badge('active', 'ok'),
        overridden ? h('span', { class: 'tag', title: 'Set through the admin API, over the config file' }, 'override') : null,
      ),
      h('td', {}, t.plan),
      h('td', {}, h('div', { class: 'tags' }, t.hosts.length ? t.hosts.map((x) => h('span', { class: 'tag' }, x)) : h('span', { class: 'muted' }, 'none'))),
      h(
        'td',
        {},
        meter(u.messagesPushed, plan?.quotas.messagesPerMonth ?? 0, (n) => `${num(n)} msg`),
      ),
      h('td', {}, meter(u.ingressBytes, plan?.quotas.ingressBytesPerMonth ?? 0, bytes)),
      rateCell('req', t.id, t.effectiveLimits?.requestsPerSec ?? plan?.limits.requestsPerSec ?? 0, 'req/s'),
      rateCell('msg', t.id, plan?.limits.messagesPerSec ?? 0, 'msg/s'),
      h(
        'td',
        {},
        h(
          'button',
          {
            type: 'button',
            class: suspended ? 'primary' : 'caution',
            onclick: action,
            disabled: !writable,
            title: writable ? null : 'Needs Redis: tenants come from the config file',
          },
          suspended ? 'Resume' : 'Suspend',
        ),
        overridden
          ? h('button', { type: 'button', onclick: reset, title: 'Drop the admin API overrides: the config file applies again' }, 'Reset to file')
          : null,
      ),
    );
  };

  page(
    'Tenants',
    `${num(total)} tenants${filtered ? ' (search below)' : ''}. Usage is this UTC month (${month}) so far; pushed messages and request body bytes count toward the quotas. Rates are live.${writable ? '' : ' Read-only: no Redis configured.'}${backing === 'memory' ? ' No Redis: changes are kept in this process only, until it exits.' : ''}`,
    h('p', { id: 'tenants-error', class: 'error', role: 'alert' }),
    tenantsSearch(plans),
    h(
      'div',
      { class: 'panel' },
      h(
        'table',
        { id: 'tenants' },
        h(
          'thead',
          {},
          h(
            'tr',
            {},
            h('th', {}, 'Tenant'),
            h('th', {}, 'Status'),
            h('th', {}, 'Plan'),
            h('th', {}, 'Hosts'),
            h('th', {}, 'Messages this month'),
            h('th', {}, 'Ingress this month'),
            h('th', { class: 'num' }, 'Request rate'),
            h('th', { class: 'num' }, 'Message rate'),
            h('th', {}, h('span', { class: 'skip' }, 'Actions')),
          ),
        ),
        h(
          'tbody',
          {},
          tenants.length === 0
            ? h('tr', {}, h('td', { colspan: 9, class: 'empty' }, filtered ? 'No tenant matches.' : 'No tenants.'))
            : tenants.map((t, i) => row(t, usage[i])),
        ),
      ),
      pager('tenants', tenantsView, next, tenants.length),
    ),
  );
  fillRates(stats);
  every(TENANTS_REFRESH_MS, async () => {
    try {
      const s = await api('GET', '/admin/v1/stats');
      if (current()) fillRates(s);
    } catch (err) {
      if (current()) failed(err);
    }
  });
}

// ---------- Tenant detail ----------

const RANGES = [
  ['24h', '24 h', 24],
  ['7d', '7 d', 24 * 7],
  ['30d', '30 d', 24 * 30],
];
const COLORS = ['#2452c5', '#1d7a3d', '#c2410c', '#7c3aed', '#0e7490', '#b42318', '#a16207'];
let chosenRange = '24h';

/** Time axis labels in UTC, 24-hour: hours within a day or two, dates beyond. */
function timeTicks(_u, ticks, _axis, _space, incr) {
  return ticks.map((ts) => {
    const iso = new Date(ts * 1000).toISOString();
    if (incr >= 24 * 3600) return iso.slice(5, 10);
    return iso.slice(11, 13) === '00' ? `${iso.slice(5, 10)} 00:00` : `${iso.slice(11, 16)}`;
  });
}

function chart(name, title, unit, labels, xs, series, target) {
  const box = h('div', { class: 'panel chart', 'data-chart': name }, h('h2', {}, title, ' ', h('small', {}, `per hour, ${unit === 'B' ? 'bytes' : unit}`)));
  target.append(box);
  const width = Math.max(320, box.clientWidth - 34);
  const opts = {
    width,
    height: 200,
    tzDate: (ts) => uPlot.tzDate(new Date(ts * 1000), 'Etc/UTC'),
    legend: { live: true },
    cursor: { drag: { x: false, y: false } },
    scales: { x: { time: true } },
    axes: [
      { stroke: '#5b6470', grid: { stroke: '#eef0f3' }, values: timeTicks },
      {
        stroke: '#5b6470',
        grid: { stroke: '#eef0f3' },
        size: unit === 'B' ? 84 : 60,
        values: (_u, ticks) => ticks.map((v) => (unit === 'B' ? bytes(v) : nf.format(v))),
      },
    ],
    series: [
      { label: 'Hour (UTC)', value: (_u, v) => (v === null ? '—' : `${utc(v * 1000).slice(0, 16)} UTC`) },
      ...labels.map((l, i) => ({
        label: l,
        stroke: COLORS[i % COLORS.length],
        width: 2,
        fill: labels.length === 1 ? 'rgba(36,82,197,.08)' : undefined,
        value: (_u, v) => (v === null ? '—' : unit === 'B' ? bytes(v) : `${num(v)} ${unit}`),
      })),
    ],
  };
  window.qeCharts[name] = new uPlot(opts, [xs, ...series], box);
}

async function renderTenant(id, current) {
  const hours = RANGES.find((r) => r[0] === chosenRange)[2];
  const now = Date.now();
  const to = now - (now % HOUR) + HOUR;
  const from = to - hours * HOUR;
  const [t, u] = await Promise.all([
    api('GET', `/admin/v1/tenants/${encodeURIComponent(id)}`),
    api('GET', `/admin/v1/tenants/${encodeURIComponent(id)}/usage?granularity=hour&from=${new Date(from).toISOString()}&to=${new Date(to).toISOString()}`),
  ]);
  if (!current()) return;
  const byStart = new Map(u.buckets.map((b) => [Date.parse(b.start), b]));
  const xs = [];
  const rows = [];
  for (let s = from; s < to; s += HOUR) {
    xs.push(s / 1000);
    rows.push(byStart.get(s) ?? { requests: 0, messagesPushed: 0, messagesDelivered: 0, acks: 0, ingressBytes: 0, egressBytes: 0, refusals: {} });
  }
  const codes = [...new Set(rows.flatMap((r) => Object.keys(r.refusals)))].sort();
  const col = (f) => rows.map((r) => r[f]);

  const rangeButtons = RANGES.map(([key, label]) =>
    h(
      'button',
      {
        type: 'button',
        'aria-pressed': String(key === chosenRange),
        onclick: () => {
          chosenRange = key;
          route();
        },
      },
      label,
    ),
  );
  const charts = h('div', { class: 'charts', id: 'charts' });
  const total = u.total;
  page(
    `Tenant ${t.id}`,
    h(
      'span',
      {},
      h('a', { href: '#/tenants' }, '← Tenants'),
      ` · plan ${t.plan} · `,
      t.status === 'suspended' ? badge('suspended', 'bad') : badge('active', 'ok'),
      ` · hosts ${t.hosts.join(', ') || 'none'} · brokers ${t.brokers.length}`,
    ),
    h(
      'div',
      { class: 'toolbar', role: 'group', 'aria-label': 'Time range' },
      h('span', { class: 'muted' }, 'Range:'),
      rangeButtons,
      h('span', { class: 'spacer' }),
      h('span', { class: 'updated' }, `${utc(from)} to ${utc(to)}, hourly buckets`),
    ),
    h(
      'div',
      { class: 'cards six' },
      card('Requests', num(total.requests), 'req'),
      card('Pushed', num(total.messagesPushed), 'msg'),
      card('Delivered', num(total.messagesDelivered), 'msg'),
      card('Acks', num(total.acks), 'acks'),
      card('Ingress', bytes(total.ingressBytes), ''),
      card('Egress', bytes(total.egressBytes), ''),
    ),
    charts,
    h('div', { class: 'panel', id: 'keys' }),
  );
  renderKeys(t.id, current);
  chart('requests', 'Requests', 'req', ['Requests'], xs, [col('requests')], charts);
  chart('messages', 'Messages', 'msg', ['Pushed', 'Delivered', 'Acked'], xs, [col('messagesPushed'), col('messagesDelivered'), col('acks')], charts);
  chart('bytes', 'Bytes', 'B', ['Ingress (request bodies)', 'Egress (response bodies)'], xs, [col('ingressBytes'), col('egressBytes')], charts);
  if (codes.length)
    chart(
      'refusals',
      'Refusals by code',
      'req',
      codes,
      xs,
      codes.map((c) => rows.map((r) => r.refusals[c] ?? 0)),
      charts,
    );
  else
    charts.append(
      h('div', { class: 'panel chart', 'data-chart': 'refusals' }, h('h2', {}, 'Refusals by code'), h('p', { class: 'empty' }, 'No refusals in this range.')),
    );
}

// ---------- A tenant's API keys ----------

const KEY_ROLES = ['read-only', 'write-only', 'read-write', 'admin'];

/** Copies text to the clipboard; where the page may not (no secure context), selects it for the person to copy. */
async function copyText(input, status) {
  try {
    await navigator.clipboard.writeText(input.value);
    status.textContent = 'Copied.';
  } catch {
    input.select();
    status.textContent = 'Selected: press Ctrl+C (or Cmd+C) to copy.';
  }
}

/** The keys panel of a tenant's page: list (never a secret), create (the key shown once, with a copy button), revoke (confirmed). */
async function renderKeys(tenantId, current, shown = null) {
  const panel = document.getElementById('keys');
  const base = `/admin/v1/tenants/${encodeURIComponent(tenantId)}/keys`;
  let keys;
  try {
    ({ keys } = await api('GET', base));
  } catch (err) {
    if (current()) panel.replaceChildren(h('h2', {}, 'API keys'), h('p', { class: 'error', role: 'alert' }, `Could not list keys: ${err.message}`));
    return;
  }
  if (!current()) return;
  const error = h('p', { class: 'error', role: 'alert', id: 'keys-error' });
  const revoke = async (k) => {
    if (
      !(await confirmDialog(
        `Revoke key ${k.id}?`,
        `Every request with the key "${k.name}" is refused with 401 on every instance within a second. This cannot be undone.`,
        'Revoke',
      ))
    )
      return;
    try {
      await apiSend('DELETE', `${base}/${encodeURIComponent(k.id)}`);
      await renderKeys(tenantId, current);
    } catch (err) {
      error.textContent = `Could not revoke ${k.id}: ${err.message}`;
    }
  };
  const name = h('input', { id: 'key-name', type: 'text', required: true, maxlength: 200, placeholder: 'e.g. billing producer', 'aria-label': 'Key name' });
  const role = h(
    'select',
    { id: 'key-role', 'aria-label': 'Role' },
    KEY_ROLES.map((r) => h('option', { value: r, selected: r === 'read-write' ? true : null }, r)),
  );
  const form = h(
    'form',
    {
      class: 'toolbar',
      onsubmit: async (e) => {
        e.preventDefault();
        try {
          const made = await apiSend('POST', base, JSON.stringify({ name: name.value.trim(), roles: [role.value] }));
          await renderKeys(tenantId, current, made);
        } catch (err) {
          error.textContent = `Could not create the key: ${err.message}`;
        }
      },
    },
    name,
    role,
    h('button', { type: 'submit', class: 'primary' }, 'Create key'),
  );
  const once = [];
  if (shown) {
    const value = h('input', { id: 'new-key', type: 'text', readonly: true, value: shown.key, size: 64, 'aria-label': 'The new key' });
    const status = h('span', { class: 'muted', role: 'status', id: 'copy-status' });
    once.push(
      h(
        'div',
        { class: 'notice', id: 'new-key-box' },
        h('p', {}, `Key ${shown.id} (${shown.roles.join(', ')}) — shown this once: copy it now.`),
        value,
        ' ',
        h('button', { type: 'button', id: 'copy-key', onclick: () => copyText(value, status) }, 'Copy'),
        ' ',
        status,
      ),
    );
  }
  panel.replaceChildren(
    h('h2', {}, 'API keys'),
    h('p', { class: 'muted' }, 'Give a key to a client as its bearer token. The secret is shown once, when the key is created; lists never hold it.'),
    ...once,
    form,
    error,
    h(
      'table',
      {},
      h(
        'thead',
        {},
        h(
          'tr',
          {},
          ['Id', 'Name', 'Roles', 'Created', 'Last used', 'Expires', 'Source', ''].map((c) => h('th', {}, c)),
        ),
      ),
      h(
        'tbody',
        {},
        keys.length === 0
          ? h('tr', {}, h('td', { colspan: 8, class: 'empty' }, 'No keys.'))
          : keys.map((k) =>
              h(
                'tr',
                { 'data-key': k.id },
                h('td', {}, h('code', {}, k.id)),
                h('td', {}, k.name || '—'),
                h('td', {}, k.roles.join(', ')),
                h('td', {}, k.createdAt ? utc(k.createdAt) : '—'),
                h('td', {}, k.lastUsedAt ? utc(k.lastUsedAt) : 'never'),
                h('td', {}, k.expiresAt ? utc(k.expiresAt) : 'never'),
                h('td', {}, k.source === 'file' ? 'config file' : 'admin API'),
                h(
                  'td',
                  {},
                  k.source === 'file'
                    ? h('span', { class: 'muted' }, 'remove from the file')
                    : h('button', { type: 'button', class: 'caution', onclick: () => revoke(k) }, 'Revoke'),
                ),
              ),
            ),
      ),
    ),
  );
  if (shown) document.getElementById('new-key').select();
}

// ---------- Brokers ----------

/** Which side of the health checker decided a change: its reason names a health check, or traffic. */
function healthSource(reason) {
  return /health check/.test(reason) ? 'active check' : 'live traffic (passive)';
}

/** The Brokers page's search and position, as the Tenants page keeps its own. */
const brokersView = { prefix: '', cursors: [''] };

async function renderBrokers() {
  const [{ clusters, next }, stats] = await Promise.all([
    api('GET', `/admin/v1/brokers?${pageQuery(brokersView, BROKERS_PAGE)}`),
    api('GET', '/admin/v1/stats'),
  ]);
  const live = new Map(stats.brokers.map((b) => [b.url, b]));
  page(
    'Brokers',
    'Each tenant’s ring: the share of lanes each broker owns while all are healthy, its health as active checks and live traffic (passive) see it, requests in flight, and the last health change with its cause.',
    listSearch('brokers', brokersView),
    ...(clusters.length === 0 ? [h('p', { class: 'empty' }, brokersView.prefix ? 'No tenant matches.' : 'No tenants.')] : []),
    ...clusters.map((c) =>
      h(
        'div',
        { class: 'panel', 'data-ring': c.tenant },
        h(
          'h2',
          {},
          `Tenant ${c.tenant}`,
          ' ',
          h('small', { class: 'muted' }, `ring hash ${c.ringHash}${c.boundedLoadFactor ? `, bounded load ×${c.boundedLoadFactor}` : ''}`),
        ),
        h(
          'table',
          {},
          h(
            'thead',
            {},
            h(
              'tr',
              {},
              h('th', {}, 'Broker'),
              h('th', {}, 'Share of lanes'),
              h('th', {}, 'Health'),
              h('th', { class: 'num' }, 'In flight'),
              h('th', { class: 'num' }, 'Picks since start'),
              h('th', {}, 'Last change'),
            ),
          ),
          h(
            'tbody',
            {},
            c.brokers.map((b) => {
              const l = b.lastChange;
              const allWorkersUp = live.get(b.url)?.up ?? b.healthy;
              return h(
                'tr',
                {},
                h('td', {}, h('code', {}, b.url)),
                h('td', {}, h('span', { class: 'share' }, h('span', { 'data-pct': 100 * b.keyShare })), `${nf1.format(100 * b.keyShare)} %`),
                h('td', {}, b.healthy && allWorkersUp ? badge('up', 'ok') : badge('down', 'bad')),
                h('td', { class: 'num' }, `${num(live.get(b.url)?.inflight ?? b.inflight)} req`),
                h('td', { class: 'num' }, num(b.picks)),
                h(
                  'td',
                  {},
                  l
                    ? h('span', {}, `${l.healthy ? 'up' : 'down'}: ${l.reason} `, h('span', { class: 'muted' }, `(${healthSource(l.reason)}, ${utc(l.at)})`))
                    : h('span', { class: 'muted' }, 'healthy since first seen'),
                ),
              );
            }),
          ),
        ),
      ),
    ),
    pager('brokers', brokersView, next, clusters.length),
  );
}

// ---------- Plans ----------

async function renderPlans() {
  const { plans, writable } = await api('GET', '/admin/v1/plans');
  const L = (p, k, unit) => `${num(p.limits[k])} ${unit}`;
  const Q = (n, fmt) => (n ? fmt(n) : 'unlimited');
  page(
    'Plans',
    writable
      ? 'Limits, quotas and features. Editable: Redis is configured (changes reach every instance within a second).'
      : 'Limits, quotas and features. Read-only: no Redis configured, plans come from the config file.',
    h('p', { id: 'plans-error', class: 'error', role: 'alert' }),
    h(
      'div',
      { class: 'panel' },
      h(
        'table',
        { id: 'plans' },
        h(
          'thead',
          {},
          h(
            'tr',
            {},
            h('th', {}, 'Plan'),
            h('th', {}, 'Features'),
            h('th', { class: 'num' }, 'Request rate'),
            h('th', { class: 'num' }, 'Message rate'),
            h('th', { class: 'num' }, 'Parked polls'),
            h('th', { class: 'num' }, 'Max payload'),
            h('th', { class: 'num' }, 'Max batch'),
            h('th', { class: 'num' }, 'Messages / month'),
            h('th', { class: 'num' }, 'Ingress / month'),
            h('th', { class: 'num' }, 'Storage'),
            writable ? h('th', {}, h('span', { class: 'skip' }, 'Actions')) : null,
          ),
        ),
        h(
          'tbody',
          {},
          plans.map((p) =>
            h(
              'tr',
              { 'data-plan': p.id },
              h('td', {}, h('strong', {}, p.id)),
              h(
                'td',
                {},
                h('div', { class: 'tags' }, p.features.length ? p.features.map((f) => h('span', { class: 'tag' }, f)) : h('span', { class: 'muted' }, 'none')),
              ),
              h('td', { class: 'num' }, `${L(p, 'requestsPerSec', 'req/s')}`, h('div', { class: 'muted' }, `burst ${num(p.limits.requestBurst)}`)),
              h('td', { class: 'num' }, `${L(p, 'messagesPerSec', 'msg/s')}`, h('div', { class: 'muted' }, `burst ${num(p.limits.messageBurst)}`)),
              h('td', { class: 'num' }, `${num(p.limits.parkedPolls)} polls`),
              h('td', { class: 'num' }, bytes(p.limits.maxPayloadBytes)),
              h('td', { class: 'num' }, `${num(p.limits.maxBatch)} items`),
              h(
                'td',
                { class: 'num' },
                Q(p.quotas.messagesPerMonth, (n) => `${num(n)} msg`),
              ),
              h('td', { class: 'num' }, Q(p.quotas.ingressBytesPerMonth, bytes)),
              h('td', { class: 'num' }, bytes(p.storageBytes)),
              writable ? h('td', {}, h('button', { type: 'button', onclick: () => editPlan(p) }, 'Edit')) : null,
            ),
          ),
        ),
      ),
    ),
  );
}

async function editPlan(p) {
  const current = JSON.stringify({ features: p.features, limits: p.limits, quotas: p.quotas, storageBytes: p.storageBytes }, null, 2);
  const area = h('textarea', { rows: 18, cols: 60, 'aria-label': `Plan ${p.id} as JSON`, spellcheck: 'false' });
  area.value = current;
  const dlg = h(
    'dialog',
    { 'aria-label': `Edit plan ${p.id}` },
    h(
      'form',
      { method: 'dialog' },
      h('h2', {}, `Edit plan ${p.id}`),
      h('p', { class: 'muted' }, 'The whole plan as JSON; it is checked by the admin API before it is saved.'),
      area,
      h('div', { class: 'actions' }, h('button', { value: 'cancel', class: 'ghost' }, 'Cancel'), h('button', { value: 'ok', class: 'primary' }, 'Save')),
    ),
  );
  document.body.append(dlg);
  dlg.showModal();
  await new Promise((r) => dlg.addEventListener('close', r, { once: true }));
  dlg.remove();
  if (dlg.returnValue !== 'ok' || area.value === current) return;
  try {
    await apiSend('PUT', `/admin/v1/plans/${encodeURIComponent(p.id)}`, area.value);
    await route();
  } catch (err) {
    if (err instanceof Unauthorized) return failed(err);
    document.getElementById('plans-error').textContent = `Plan ${p.id} not saved: ${err.message}`;
  }
}

// A sign-in link (`/console#token=...`, what `npm run demo` prints): the token goes to this tab's
// session storage and leaves the address bar and its history entry at once.
{
  const m = /^#token=([^&]+)$/.exec(location.hash);
  if (m) {
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]));
    history.replaceState(null, '', `${location.pathname}#/overview`);
  }
}

route();

// Warren's management UI: one page, plain JavaScript, built only on the public HTTP API
// (/api/...). Credentials are kept in sessionStorage and sent as basic auth; what a user sees
// follows their tags as in RabbitMQ (management, policymaker, monitoring, administrator).
'use strict';

const MANAGEMENT_TAGS = ['management', 'policymaker', 'monitoring', 'administrator'];
const REFRESH_MS = 5000;
const state = { auth: null, user: null, timer: null, queues: { page: 1, size: 50, sort: 'name', reverse: false, name: '', regex: false }, connections: { page: 1, size: 100 }, generation: 0 };

// ---- small DOM helpers (text only: broker names never become markup) ----
function h(tag, attrs, ...children) {
  const element = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on')) element.addEventListener(key.slice(2), value);
    else if (key === 'text') element.textContent = value;
    else element.setAttribute(key, value === true ? '' : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}
const $ = (id) => document.getElementById(id);
let fieldCounter = 0;
function field(labelText, input) {
  const id = input.id || `field-${++fieldCounter}`;
  input.id = id;
  return h('div', { class: 'field' }, h('label', { for: id }, labelText), input);
}
function say(message) {
  $('status').textContent = message;
  clearTimeout(say.timer);
  say.timer = setTimeout(() => { $('status').textContent = ''; }, 6000);
}
function number(value) {
  if (value === undefined || value === null) return '';
  if (typeof value === 'number' && !Number.isInteger(value)) return value.toFixed(1);
  return String(value);
}
function bytes(value) {
  if (!value && value !== 0) return '';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
  return `${value.toFixed(unit ? 1 : 0)} ${units[unit]}`;
}
const enc = encodeURIComponent;
function rate(stats, name) {
  const details = stats && stats[`${name}_details`];
  return details ? `${number(details.rate)}/s` : '';
}
function table(columns, rows, options = {}) {
  const head = h('tr', {}, columns.map((c) => {
    const label = c.sort && options.onSort
      ? h('button', { type: 'button', class: 'sort', onclick: () => options.onSort(c.sort), 'aria-label': `Sort by ${c.title}` },
        c.title, options.sorted === c.sort ? (options.reverse ? ' ▼' : ' ▲') : '')
      : c.title;
    return h('th', { scope: 'col', class: [c.num ? 'num' : '', c.narrow ? 'hide-narrow' : ''].join(' ').trim() || null }, label);
  }));
  const body = rows.length
    ? rows.map((row) => h('tr', {}, columns.map((c) => h('td', { class: [c.num ? 'num' : '', c.narrow ? 'hide-narrow' : ''].join(' ').trim() || null }, c.cell(row)))))
    : [h('tr', {}, h('td', { colspan: columns.length, class: 'note' }, options.empty || 'None.'))];
  return h('div', { class: 'table-wrap' }, h('table', { 'aria-label': options.label || null }, h('thead', {}, head), h('tbody', {}, body)));
}

// ---- the API ----
class ApiError extends Error {
  constructor(status, body) {
    super((body && (body.reason || body.error)) || `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}
async function api(method, path, body, headers = {}) {
  // X-Requested-With keeps the browser from answering a 401 with its own login dialog.
  const init = { method, headers: { Authorization: `Basic ${state.auth}`, 'X-Requested-With': 'XMLHttpRequest', ...headers } };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = typeof body === 'string' ? body : JSON.stringify(body);
  }
  const response = await fetch(path, init);
  const text = await response.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch (_) { json = text; }
  if (response.status === 401 && path === '/api/whoami') throw new ApiError(401, json);
  if (!response.ok) throw new ApiError(response.status, json);
  return json;
}
function tagsOf(user) {
  const tags = user.tags;
  return Array.isArray(tags) ? tags : String(tags || '').split(',').map((t) => t.trim()).filter(Boolean);
}
function has(tag) {
  const tags = tagsOf(state.user);
  if (tags.includes('administrator')) return true;
  if (tag === 'management') return tags.some((t) => MANAGEMENT_TAGS.includes(t));
  return tags.includes(tag);
}
async function act(description, work) {
  try {
    const result = await work();
    say(description);
    return result;
  } catch (error) {
    say(`Failed: ${error.message}`);
    throw error;
  }
}

// ---- log in and out ----
async function login(username, password) {
  state.auth = btoa(unescape(encodeURIComponent(`${username}:${password}`)));
  let user;
  try {
    user = await api('GET', '/api/whoami');
  } catch (error) {
    state.auth = null;
    const reason = error.body && error.body.reason;
    throw new Error(reason === 'Not management user' ? 'This user has no management tag and cannot use the UI.' : 'Login failed: wrong username or password.');
  }
  if (!tagsOf(user).some((t) => MANAGEMENT_TAGS.includes(t))) {
    state.auth = null;
    throw new Error('This user has no management tag and cannot use the UI.');
  }
  state.user = user;
  sessionStorage.setItem('warren-auth', state.auth);
}
function logout() {
  sessionStorage.removeItem('warren-auth');
  state.auth = null;
  state.user = null;
  stopRefresh();
  state.generation += 1;
  $('nav').hidden = true;
  $('who').hidden = true;
  $('page').hidden = true;
  $('page').replaceChildren();
  $('login').hidden = false;
  $('login-password').value = '';
  if (location.hash) history.replaceState(null, '', location.pathname);
  $('login-username').focus();
}
function showApp() {
  $('login').hidden = true;
  $('page').hidden = false;
  $('who').hidden = false;
  $('who-name').textContent = `${state.user.name} (${tagsOf(state.user).join(', ')})`;
  const pages = [['overview', 'Overview'], ['connections', 'Connections'], ['channels', 'Channels'], ['exchanges', 'Exchanges'], ['queues', 'Queues']];
  if (has('administrator') || has('policymaker')) pages.push(['admin', 'Admin']);
  $('nav').replaceChildren(...pages.map(([id, title]) => h('a', { href: `#/${id}`, 'data-page': id }, title)));
  $('nav').hidden = false;
  route();
}

// ---- routing ----
function stopRefresh() {
  if (state.timer) clearInterval(state.timer);
  state.timer = null;
}
function every(view, render) {
  if (!view.current()) return;
  stopRefresh();
  state.timer = setInterval(() => render().catch(() => {}), REFRESH_MS);
}
async function route() {
  if (!state.user) return;
  stopRefresh();
  const parts = location.hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent);
  const page = parts[0] || 'overview';
  for (const link of $('nav').querySelectorAll('a')) {
    if (link.dataset.page === page) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
  // Each visit renders through its own view: a render that finishes after the user went to
  // another page (a slow listing, the re-render after a purge) is dropped instead of
  // replacing the page now shown.
  const generation = ++state.generation;
  const element = $('page');
  const view = {
    current: () => generation === state.generation,
    replaceChildren: (...children) => { if (generation === state.generation) element.replaceChildren(...children); },
  };
  const pages = { overview: showOverview, connections: showConnections, channels: showChannels, exchanges: showExchanges, queues: showQueues, admin: showAdmin };
  // The Admin page is for administrators and policymakers only, as in RabbitMQ; anyone
  // else asking for it by its address gets the overview.
  const allowed = page !== 'admin' || has('administrator') || has('policymaker');
  const show = (allowed && pages[page]) || showOverview;
  try {
    await show(view, parts.slice(1));
  } catch (error) {
    view.replaceChildren(h('h1', {}, 'Error'), h('p', { class: 'error', role: 'alert' }, error.message));
  }
}
function titled(view, title, ...content) {
  view.replaceChildren(h('h1', { id: 'page-title' }, title), ...content);
}
async function vhostNames() {
  return (await api('GET', '/api/vhosts')).map((v) => v.name);
}
function vhostSelect(names, id) {
  return h('select', { id, name: 'vhost' }, names.map((n) => h('option', { value: n }, n)));
}

// ---- Overview ----
function series(samples) {
  return (samples || []).map((s) => [s.timestamp, s.sample]).sort((a, b) => a[0] - b[0]);
}
function rates(samples) {
  const points = series(samples);
  const out = [];
  for (let i = 1; i < points.length; i += 1) {
    const seconds = (points[i][0] - points[i - 1][0]) / 1000;
    if (seconds > 0) out.push([points[i][0], Math.max(0, (points[i][1] - points[i - 1][1]) / seconds)]);
  }
  return out;
}
const COLOURS = ['#0b5cad', '#d9822b', '#1b7a35', '#8e44ad', '#b00020'];
function chart(title, lines, unit) {
  const width = 600;
  const height = 160;
  const all = lines.flatMap((l) => l.points);
  const times = all.map((p) => p[0]);
  const values = all.map((p) => p[1]);
  const t0 = Math.min(...times);
  const t1 = Math.max(...times);
  const top = Math.max(1, ...values);
  const x = (t) => (t1 > t0 ? ((t - t0) / (t1 - t0)) * (width - 10) + 5 : width / 2);
  const y = (v) => height - 18 - (v / top) * (height - 30);
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('viewBox', `0 0 ${width} ${height}`);
  svg.setAttribute('class', 'chart');
  svg.setAttribute('role', 'img');
  const latest = lines.map((l) => `${l.name} ${number(l.points.length ? l.points[l.points.length - 1][1] : 0)}${unit}`).join(', ');
  svg.setAttribute('aria-label', `${title}: ${all.length ? latest : 'no samples yet'}`);
  const label = document.createElementNS(ns, 'text');
  label.setAttribute('x', '6');
  label.setAttribute('y', '14');
  label.setAttribute('font-size', '12');
  label.setAttribute('fill', '#5b6670');
  label.textContent = all.length ? `max ${number(top)}${unit}` : 'no samples yet';
  svg.append(label);
  lines.forEach((line, index) => {
    if (!line.points.length) return;
    const path = document.createElementNS(ns, 'polyline');
    path.setAttribute('fill', 'none');
    path.setAttribute('stroke', COLOURS[index % COLOURS.length]);
    path.setAttribute('stroke-width', '2');
    path.setAttribute('points', line.points.map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(' '));
    svg.append(path);
  });
  const legend = h('div', { class: 'legend' }, lines.map((l, i) => h('span', {}, h('span', { class: 'swatch', style: `background:${COLOURS[i % COLOURS.length]}` }), l.name)));
  return h('figure', {}, h('figcaption', {}, title), svg, legend);
}
async function showOverview(view) {
  const render = async () => {
    const overview = await api('GET', '/api/overview?lengths_age=600&lengths_incr=5&msg_rates_age=600&msg_rates_incr=5');
    const nodes = has('monitoring') ? await api('GET', '/api/nodes') : [];
    const totals = overview.object_totals || {};
    const queued = overview.queue_totals || {};
    const stats = overview.message_stats || {};
    const card = (label, value) => h('div', { class: 'card' }, h('div', { class: 'value' }, number(value || 0)), h('div', { class: 'label' }, label));
    const sample = (name) => (stats[`${name}_details`] || {}).samples;
    titled(view, 'Overview',
      h('p', { class: 'note' }, `${overview.product_name} ${overview.product_version} (RabbitMQ ${overview.rabbitmq_version} API), cluster ${overview.cluster_name}`),
      h('div', { class: 'cards', 'aria-label': 'Totals' },
        card('Connections', totals.connections), card('Channels', totals.channels), card('Exchanges', totals.exchanges),
        card('Queues', totals.queues), card('Consumers', totals.consumers), card('Messages', queued.messages),
        card('Ready', queued.messages_ready), card('Unacknowledged', queued.messages_unacknowledged)),
      h('h2', {}, 'Charts'),
      h('div', { class: 'charts' },
        chart('Queued messages', [
          { name: 'Total', points: series((queued.messages_details || {}).samples) },
          { name: 'Ready', points: series((queued.messages_ready_details || {}).samples) },
          { name: 'Unacked', points: series((queued.messages_unacknowledged_details || {}).samples) },
        ], ''),
        chart('Message rates', [
          { name: 'Publish', points: rates(sample('publish')) },
          { name: 'Deliver / get', points: rates(sample('deliver_get')) },
          { name: 'Ack', points: rates(sample('ack')) },
        ], '/s')),
      nodes.length ? h('h2', {}, 'Nodes') : null,
      nodes.length ? table([
        { title: 'Name', cell: (n) => n.name },
        { title: 'Memory', cell: (n) => h('span', {}, `${bytes(n.mem_used)} of ${bytes(n.mem_limit)} `, h('span', { class: n.mem_alarm ? 'badge alarm' : 'badge fine' }, n.mem_alarm ? 'memory alarm' : 'ok')) },
        { title: 'Disk free', cell: (n) => h('span', {}, `${bytes(n.disk_free)} (limit ${bytes(n.disk_free_limit)}) `, h('span', { class: n.disk_free_alarm ? 'badge alarm' : 'badge fine' }, n.disk_free_alarm ? 'disk alarm' : 'ok')) },
        { title: 'Uptime', narrow: true, cell: (n) => `${Math.round((n.uptime || 0) / 1000)} s` },
      ], nodes, { label: 'Nodes' }) : null,
      h('h2', {}, 'Listeners'),
      table([
        { title: 'Protocol', cell: (l) => l.protocol },
        { title: 'Interface', cell: (l) => l.ip_address },
        { title: 'Port', num: true, cell: (l) => l.port },
      ], overview.listeners || [], { label: 'Listeners' }));
  };
  await render();
  every(view, render);
}

// ---- Connections and channels ----
async function showConnections(view) {
  const c = state.connections;
  const render = async () => {
    let listing;
    try {
      listing = await api('GET', `/api/connections?${new URLSearchParams({ page: c.page, page_size: c.size, sort: 'name' })}`);
    } catch (error) {
      if (error.message === 'page_out_of_range' && c.page > 1) { c.page = 1; return render(); }
      throw error;
    }
    const connections = listing.items;
    // One page at a time, so a thousand connections stay quick to show.
    const pager = h('nav', { class: 'toolbar', 'aria-label': 'Pages of connections' },
      h('button', { type: 'button', class: 'secondary', disabled: listing.page <= 1, onclick: () => { c.page -= 1; render(); } }, 'Previous page'),
      h('span', { id: 'connection-page' }, `Page ${listing.page} of ${listing.page_count} (${listing.total_count} connections)`),
      h('button', { type: 'button', class: 'secondary', disabled: listing.page >= listing.page_count, onclick: () => { c.page += 1; render(); } }, 'Next page'));
    titled(view, 'Connections', pager, table([
      { title: 'Name', cell: (c) => c.name },
      { title: 'Protocol', cell: (c) => c.protocol },
      { title: 'User', cell: (c) => c.user },
      { title: 'Virtual host', cell: (c) => c.vhost },
      { title: 'Client', narrow: true, cell: (c) => { const p = c.client_properties || {}; return [p.product, p.version].filter(Boolean).join(' ') || c.user_provided_name || ''; } },
      { title: 'Channels', num: true, cell: (c) => c.channels },
      { title: 'TLS', narrow: true, cell: (c) => (c.ssl ? 'yes' : 'no') },
      { title: 'From client', num: true, narrow: true, cell: (c) => rate(c, 'recv_oct') },
      { title: 'To client', num: true, narrow: true, cell: (c) => rate(c, 'send_oct') },
      { title: 'Actions', cell: (c) => h('button', { type: 'button', class: 'danger', 'aria-label': `Close connection ${c.name}`, onclick: async () => {
        await act(`Closed ${c.name}`, () => api('DELETE', `/api/connections/${enc(c.name)}`, undefined, { 'X-Reason': 'Closed via the management UI' }));
        await render();
      } }, 'Close') },
    ], connections, { label: 'Connections', empty: 'No connections.' }));
  };
  await render();
  every(view, render);
}
async function showChannels(view) {
  const render = async () => {
    const channels = await api('GET', '/api/channels');
    titled(view, 'Channels', table([
      // The API lists channels by connection, user and vhost; it has no per-channel
      // prefetch, unacknowledged or consumer counts (the core counts channels only).
      { title: 'Channel', cell: (c) => c.name },
      { title: 'Node', narrow: true, cell: (c) => c.node },
      { title: 'User', cell: (c) => c.user },
      { title: 'Virtual host', cell: (c) => c.vhost },
      { title: 'State', cell: (c) => c.state },
    ], channels, { label: 'Channels', empty: 'No channels.' }));
  };
  await render();
  every(view, render);
}

// ---- Exchanges ----
async function showExchanges(view, rest) {
  if (rest.length >= 2) return showExchange(view, rest[0], rest[1]);
  const [exchanges, vhosts] = await Promise.all([api('GET', '/api/exchanges'), vhostNames()]);
  const name = h('input', { id: 'exchange-name', required: true });
  const type = h('select', { id: 'exchange-type' }, ['direct', 'fanout', 'topic', 'headers'].map((t) => h('option', { value: t }, t)));
  const durable = h('select', { id: 'exchange-durable' }, h('option', { value: 'true' }, 'Durable'), h('option', { value: 'false' }, 'Transient'));
  const vhost = vhostSelect(vhosts, 'exchange-vhost');
  const form = h('form', { class: 'inline', 'aria-label': 'Add an exchange', onsubmit: async (event) => {
    event.preventDefault();
    await act(`Exchange ${name.value} declared`, () => api('PUT', `/api/exchanges/${enc(vhost.value)}/${enc(name.value)}`, { type: type.value, durable: durable.value === 'true', auto_delete: false, arguments: {} }));
    await showExchanges(view, []);
  } }, field('Virtual host', vhost), field('Name', name), field('Type', type), field('Durability', durable), h('button', { type: 'submit' }, 'Add exchange'));
  titled(view, 'Exchanges', table([
    { title: 'Virtual host', cell: (x) => x.vhost },
    { title: 'Name', cell: (x) => h('a', { href: `#/exchanges/${enc(x.vhost)}/${enc(x.name || 'amq.default')}` }, x.name || '(AMQP default)') },
    { title: 'Type', cell: (x) => x.type },
    { title: 'Features', narrow: true, cell: (x) => [x.durable ? 'D' : '', x.auto_delete ? 'AD' : '', x.internal ? 'I' : ''].filter(Boolean).join(' ') },
    { title: 'In', num: true, narrow: true, cell: (x) => rate(x.message_stats, 'publish_in') },
    { title: 'Out', num: true, narrow: true, cell: (x) => rate(x.message_stats, 'publish_out') },
  ], exchanges, { label: 'Exchanges' }), h('h2', {}, 'Add an exchange'), form);
}
function publishForm(vhost, exchange, fixedKey) {
  const key = h('input', { id: 'publish-routing-key', value: fixedKey || '' });
  const persistent = h('select', { id: 'publish-delivery-mode' }, h('option', { value: '1' }, 'Non-persistent'), h('option', { value: '2' }, 'Persistent'));
  const headers = h('input', { id: 'publish-headers', placeholder: '{"x-header": "value"}' });
  const payload = h('textarea', { id: 'publish-payload' });
  const result = h('p', { id: 'publish-result', role: 'status' });
  return h('form', { class: 'inline', 'aria-label': 'Publish a message', onsubmit: async (event) => {
    event.preventDefault();
    let parsedHeaders = {};
    try { parsedHeaders = headers.value.trim() ? JSON.parse(headers.value) : {}; } catch (_) { result.textContent = 'Headers must be a JSON object.'; return; }
    const answer = await act('Published', () => api('POST', `/api/exchanges/${enc(vhost)}/${enc(exchange || 'amq.default')}/publish`, {
      routing_key: key.value, payload: payload.value, payload_encoding: 'string',
      properties: { delivery_mode: Number(persistent.value), headers: parsedHeaders },
    }));
    result.textContent = answer && answer.routed ? 'Message published and routed.' : 'Message published, but not routed.';
  } }, fixedKey === undefined ? field('Routing key', key) : null, field('Delivery mode', persistent), field('Headers (JSON)', headers), field('Payload', payload), h('button', { type: 'submit' }, 'Publish message'), result);
}
async function showExchange(view, vhost, name) {
  const exchangeName = name === 'amq.default' ? '' : name;
  const path = `/api/exchanges/${enc(vhost)}/${enc(name)}`;
  const [exchange, bindings, queues] = await Promise.all([api('GET', path), api('GET', `${path}/bindings/source`), api('GET', `/api/queues/${enc(vhost)}`)]);
  const destination = h('select', { id: 'binding-destination' }, queues.map((q) => h('option', { value: q.name }, q.name)));
  const key = h('input', { id: 'binding-routing-key' });
  const bindForm = exchangeName ? h('form', { class: 'inline', 'aria-label': 'Add a binding', onsubmit: async (event) => {
    event.preventDefault();
    await act('Binding added', () => api('POST', `/api/bindings/${enc(vhost)}/e/${enc(name)}/q/${enc(destination.value)}`, { routing_key: key.value, arguments: {} }));
    await showExchange(view, vhost, name);
  } }, field('To queue', destination), field('Routing key', key), h('button', { type: 'submit' }, 'Bind')) : null;
  titled(view, `Exchange ${exchangeName || '(AMQP default)'}`,
    h('p', {}, h('a', { href: '#/exchanges' }, 'All exchanges')),
    h('dl', { class: 'props' }, h('dt', {}, 'Virtual host'), h('dd', {}, vhost), h('dt', {}, 'Type'), h('dd', {}, exchange.type),
      h('dt', {}, 'Durable'), h('dd', {}, String(exchange.durable)), h('dt', {}, 'Arguments'), h('dd', {}, JSON.stringify(exchange.arguments || {}))),
    h('h2', {}, 'Bindings'),
    table([
      { title: 'To', cell: (b) => `${b.destination_type} ${b.destination}` },
      { title: 'Routing key', cell: (b) => b.routing_key },
      { title: 'Arguments', narrow: true, cell: (b) => JSON.stringify(b.arguments || {}) },
      { title: 'Actions', cell: (b) => (exchangeName ? h('button', { type: 'button', class: 'secondary', onclick: async () => {
        await act('Binding removed', () => api('DELETE', `/api/bindings/${enc(vhost)}/e/${enc(name)}/${b.destination_type === 'queue' ? 'q' : 'e'}/${enc(b.destination)}/${enc(b.properties_key)}`));
        await showExchange(view, vhost, name);
      } }, 'Unbind') : '') },
    ], bindings, { label: 'Bindings', empty: 'No bindings.' }),
    bindForm,
    h('h2', {}, 'Publish a message'), publishForm(vhost, name),
    exchangeName && !exchangeName.startsWith('amq.') ? h('h2', {}, 'Delete') : null,
    exchangeName && !exchangeName.startsWith('amq.') ? h('button', { type: 'button', class: 'danger', id: 'exchange-delete', onclick: async () => {
      await act(`Exchange ${exchangeName} deleted`, () => api('DELETE', path));
      location.hash = '#/exchanges';
    } }, 'Delete this exchange') : null);
}

// ---- Messages (get and browse answers) ----
function messageList(messages, heading, empty) {
  if (!messages.length) return h('p', {}, empty);
  return h('div', {}, messages.map((m, i) => h('div', { class: 'message' },
    h('h3', {}, heading(m, i)),
    h('dl', { class: 'props' }, h('dt', {}, 'Exchange'), h('dd', {}, m.exchange || '(AMQP default)'), h('dt', {}, 'Routing key'), h('dd', {}, m.routing_key),
      h('dt', {}, 'Redelivered'), h('dd', {}, String(m.redelivered)), h('dt', {}, 'Properties'), h('dd', {}, JSON.stringify(m.properties || {})),
      h('dt', {}, `Payload (${m.payload_bytes} bytes, ${m.payload_encoding})`), h('dd', {}, h('pre', { class: 'payload' }, m.payload))))));
}

// ---- Queues ----
async function showQueues(view, rest) {
  if (rest.length >= 2) return showQueue(view, rest[0], rest[1]);
  const q = state.queues;
  const query = new URLSearchParams({ page: q.page, page_size: q.size, name: q.name, use_regex: q.regex, sort: q.sort, sort_reverse: q.reverse });
  let listing;
  try {
    listing = await api('GET', `/api/queues?${query}`);
  } catch (error) {
    if (error.message === 'page_out_of_range' && q.page > 1) { q.page = 1; return showQueues(view, rest); }
    throw error;
  }
  const vhosts = await vhostNames();
  const filter = h('input', { id: 'queue-filter', value: q.name, placeholder: 'name' });
  const regex = h('input', { id: 'queue-regex', type: 'checkbox', checked: q.regex });
  const size = h('select', { id: 'queue-page-size' }, [20, 50, 100, 500].map((n) => h('option', { value: n, selected: n === q.size }, n)));
  const again = () => showQueues(view, []);
  const toolbar = h('form', { class: 'toolbar', 'aria-label': 'Filter queues', onsubmit: (event) => {
    event.preventDefault();
    q.name = filter.value; q.regex = regex.checked; q.size = Number(size.value); q.page = 1;
    again();
  } }, field('Filter by name', filter), h('div', { class: 'field' }, h('label', { for: 'queue-regex' }, regex, ' Regular expression')), field('Page size', size), h('button', { type: 'submit' }, 'Apply'));
  const pager = h('nav', { class: 'toolbar', 'aria-label': 'Pages of queues' },
    h('button', { type: 'button', class: 'secondary', disabled: listing.page <= 1, onclick: () => { q.page -= 1; again(); } }, 'Previous page'),
    h('span', { id: 'queue-page' }, `Page ${listing.page} of ${listing.page_count} (${listing.filtered_count} of ${listing.total_count} queues)`),
    h('button', { type: 'button', class: 'secondary', disabled: listing.page >= listing.page_count, onclick: () => { q.page += 1; again(); } }, 'Next page'));
  const onSort = (key) => { if (q.sort === key) q.reverse = !q.reverse; else { q.sort = key; q.reverse = false; } again(); };
  const name = h('input', { id: 'queue-name', required: true });
  const type = h('select', { id: 'queue-type' }, ['classic', 'quorum', 'stream'].map((t) => h('option', { value: t }, t)));
  const durable = h('select', { id: 'queue-durable' }, h('option', { value: 'true' }, 'Durable'), h('option', { value: 'false' }, 'Transient'));
  const args = h('input', { id: 'queue-arguments', placeholder: '{"x-max-length": 1000}' });
  const vhost = vhostSelect(vhosts, 'queue-vhost');
  const form = h('form', { class: 'inline', 'aria-label': 'Add a queue', onsubmit: async (event) => {
    event.preventDefault();
    let argumentsTable = {};
    try { argumentsTable = args.value.trim() ? JSON.parse(args.value) : {}; } catch (_) { say('Arguments must be a JSON object.'); return; }
    if (type.value !== 'classic') argumentsTable['x-queue-type'] = type.value;
    await act(`Queue ${name.value} declared`, () => api('PUT', `/api/queues/${enc(vhost.value)}/${enc(name.value)}`, { durable: durable.value === 'true', auto_delete: false, arguments: argumentsTable }));
    await again();
  } }, field('Virtual host', vhost), field('Name', name), field('Type', type), field('Durability', durable), field('Arguments (JSON)', args), h('button', { type: 'submit' }, 'Add queue'));
  titled(view, 'Queues', toolbar, pager, table([
    { title: 'Virtual host', narrow: true, cell: (x) => x.vhost, sort: 'vhost' },
    { title: 'Name', cell: (x) => h('a', { href: `#/queues/${enc(x.vhost)}/${enc(x.name)}` }, x.name), sort: 'name' },
    { title: 'Type', narrow: true, cell: (x) => x.type, sort: 'type' },
    { title: 'Node', narrow: true, cell: (x) => (x.members && x.members.length > 1 ? `${x.leader || x.node} +${x.members.length - 1}` : (x.leader || x.node || '')) },
    { title: 'State', narrow: true, cell: (x) => x.state },
    { title: 'Ready', num: true, cell: (x) => number(x.messages_ready), sort: 'messages_ready' },
    { title: 'Unacked', num: true, cell: (x) => number(x.messages_unacknowledged), sort: 'messages_unacknowledged' },
    { title: 'Total', num: true, cell: (x) => number(x.messages), sort: 'messages' },
    { title: 'Consumers', num: true, narrow: true, cell: (x) => number(x.consumers), sort: 'consumers' },
    { title: 'Incoming', num: true, narrow: true, cell: (x) => rate(x.message_stats, 'publish') },
  ], listing.items, { label: 'Queues', onSort, sorted: q.sort, reverse: q.reverse, empty: 'No queues match.' }), h('h2', {}, 'Add a queue'), form);
}
async function showQueue(view, vhost, name) {
  const path = `/api/queues/${enc(vhost)}/${enc(name)}`;
  const [queue, bindings, consumers] = await Promise.all([api('GET', path), api('GET', `${path}/bindings`).catch(() => []), api('GET', `/api/consumers/${enc(vhost)}`)]);
  const mine = consumers.filter((c) => c.queue && c.queue.name === name);
  const count = h('input', { id: 'get-count', type: 'number', min: '1', value: '1' });
  const ackmode = h('select', { id: 'get-ackmode' },
    h('option', { value: 'ack_requeue_true' }, 'Nack message requeue true'),
    h('option', { value: 'ack_requeue_false' }, 'Automatic ack'),
    h('option', { value: 'reject_requeue_true' }, 'Reject requeue true'),
    h('option', { value: 'reject_requeue_false' }, 'Reject requeue false'));
  const got = h('div', { id: 'get-result', role: 'status' });
  const getForm = h('form', { class: 'inline', 'aria-label': 'Get messages', onsubmit: async (event) => {
    event.preventDefault();
    const messages = await act('Fetched', () => api('POST', `${path}/get`, { count: Number(count.value), ackmode: ackmode.value, encoding: 'auto', truncate: 50000 }));
    got.replaceChildren(messageList(messages, (m, i) => `Message ${i + 1}`, 'Queue is empty.'));
  } }, field('Messages', count), field('Ack mode', ackmode), h('button', { type: 'submit' }, 'Get messages'));
  const isStream = queue.type === 'stream';
  const from = h('input', { id: 'browse-from', type: 'number', min: isStream ? '0' : '1', value: isStream ? String(queue.first_offset || 0) : '1' });
  const browseCount = h('input', { id: 'browse-count', type: 'number', min: '1', max: '1000', value: '10' });
  const browsed = h('div', { id: 'browse-result', role: 'status' });
  const browseForm = h('form', { class: 'inline', 'aria-label': 'Browse messages', onsubmit: async (event) => {
    event.preventDefault();
    const query = new URLSearchParams({ count: browseCount.value, encoding: 'auto', truncate: 50000 });
    query.set(isStream ? 'offset' : 'position', from.value);
    const messages = await act('Browsed', () => api('GET', `${path}/browse?${query}`));
    browsed.replaceChildren(messageList(messages, (m) => (isStream ? `Offset ${m.offset}` : `Position ${m.position}`), 'No messages there.'));
  } }, field(isStream ? 'From offset' : 'From position', from), field('Messages', browseCount), h('button', { type: 'submit' }, 'Browse messages'));
  const stats = queue.message_stats || {};
  titled(view, `Queue ${name}`,
    h('p', {}, h('a', { href: '#/queues' }, 'All queues')),
    h('dl', { class: 'props', 'aria-label': 'Details' },
      h('dt', {}, 'Virtual host'), h('dd', {}, vhost), h('dt', {}, 'Type'), h('dd', {}, queue.type), h('dt', {}, 'State'), h('dd', {}, queue.state),
      h('dt', {}, 'Durable'), h('dd', {}, String(queue.durable)), h('dt', {}, 'Policy'), h('dd', {}, queue.policy || ''),
      // Replicated queues (quorum): where the leader and the members are, as RabbitMQ shows them.
      ...(queue.members ? [
        h('dt', {}, 'Leader'), h('dd', { id: 'queue-leader' }, queue.leader || '(electing)'),
        h('dt', {}, 'Members'), h('dd', { id: 'queue-members' }, queue.members.map((m) => ((queue.online || []).includes(m) ? m : `${m} (offline)`)).join(', ')),
      ] : [h('dt', {}, 'Node'), h('dd', {}, queue.node || '')]),
      h('dt', {}, 'Messages'), h('dd', { id: 'queue-messages' }, `${number(queue.messages)} total, ${number(queue.messages_ready)} ready, ${number(queue.messages_unacknowledged)} unacknowledged`),
      h('dt', {}, 'Rates'), h('dd', { id: 'queue-rates' }, `publish ${rate(stats, 'publish') || '0/s'}, deliver/get ${rate(stats, 'deliver_get') || '0/s'}, ack ${rate(stats, 'ack') || '0/s'}`),
      h('dt', {}, 'Arguments'), h('dd', { id: 'queue-arguments-shown' }, JSON.stringify(queue.arguments || {}))),
    h('h2', {}, 'Consumers'),
    table([
      { title: 'Consumer tag', cell: (c) => c.consumer_tag },
      { title: 'Connection', cell: (c) => (c.channel_details || {}).name || (c.channel_details || {}).connection_name || '' },
      { title: 'Ack required', narrow: true, cell: (c) => String(c.ack_required) },
      { title: 'Prefetch', num: true, narrow: true, cell: (c) => number(c.prefetch_count) },
    ], mine, { label: 'Consumers', empty: 'No consumers.' }),
    h('h2', {}, 'Bindings'),
    table([
      { title: 'From', cell: (b) => b.source || '(AMQP default)' },
      { title: 'Routing key', cell: (b) => b.routing_key },
      { title: 'Arguments', narrow: true, cell: (b) => JSON.stringify(b.arguments || {}) },
    ], bindings, { label: 'Bindings' }),
    h('h2', {}, 'Publish a message'), publishForm(vhost, '', name),
    h('h2', {}, 'Browse messages'),
    h('p', { class: 'note' }, isStream
      ? 'Reads records from an offset without consuming anything.'
      : 'Reads ready messages from a position (1 is the head) without consuming them: nothing is taken, redelivered or reordered.'),
    browseForm, browsed,
    isStream ? null : h('h2', {}, 'Get messages'),
    isStream ? null : h('p', { class: 'note' }, 'Getting a message takes it from the queue (with requeue it goes back as redelivered).'),
    isStream ? null : getForm, isStream ? null : got,
    h('h2', {}, 'Purge and delete'),
    h('div', { class: 'toolbar' },
      h('button', { type: 'button', class: 'secondary', id: 'queue-purge', onclick: async () => {
        await act(`Queue ${name} purged`, () => api('DELETE', `${path}/contents`));
        await showQueue(view, vhost, name);
      } }, 'Purge messages'),
      h('button', { type: 'button', class: 'danger', id: 'queue-delete', onclick: async () => {
        await act(`Queue ${name} deleted`, () => api('DELETE', path));
        location.hash = '#/queues';
      } }, 'Delete queue')));
}

// ---- Admin ----
const ADMIN_TABS = [['users', 'Users'], ['vhosts', 'Virtual hosts'], ['permissions', 'Permissions'], ['topic-permissions', 'Topic permissions'], ['policies', 'Policies'], ['operator-policies', 'Operator policies'], ['limits', 'Limits'], ['definitions', 'Definitions']];
async function showAdmin(view, rest) {
  const tabs = has('administrator') ? ADMIN_TABS : ADMIN_TABS.filter(([id]) => id === 'policies');
  const current = tabs.some(([id]) => id === rest[0]) ? rest[0] : tabs[0][0];
  const bar = h('div', { class: 'tabs', role: 'tablist', 'aria-label': 'Admin sections' }, tabs.map(([id, title]) => h('button', {
    type: 'button', role: 'tab', id: `tab-${id}`, 'aria-selected': String(id === current), onclick: () => { location.hash = `#/admin/${id}`; },
  }, title)));
  const panel = h('div', { role: 'tabpanel', 'aria-labelledby': `tab-${current}` });
  titled(view, 'Admin', bar, panel);
  const again = () => showAdmin(view, [current]);
  const sections = { users: adminUsers, vhosts: adminVhosts, permissions: adminPermissions, 'topic-permissions': adminTopicPermissions, policies: (p, a) => adminPolicies(p, a, false), 'operator-policies': (p, a) => adminPolicies(p, a, true), limits: adminLimits, definitions: adminDefinitions };
  await sections[current](panel, again);
}
async function adminUsers(panel, again) {
  const users = await api('GET', '/api/users');
  const name = h('input', { id: 'user-name', required: true });
  const password = h('input', { id: 'user-password', type: 'password' });
  const tags = h('input', { id: 'user-tags', placeholder: 'administrator, monitoring' });
  panel.replaceChildren(h('h2', {}, 'Users'), table([
    { title: 'Name', cell: (u) => u.name },
    { title: 'Tags', cell: (u) => tagsOf(u).join(', ') },
    { title: 'Actions', cell: (u) => h('button', { type: 'button', class: 'danger', 'aria-label': `Delete user ${u.name}`, onclick: async () => { await act(`User ${u.name} deleted`, () => api('DELETE', `/api/users/${enc(u.name)}`)); await again(); } }, 'Delete') },
  ], users, { label: 'Users' }),
  h('h2', {}, 'Add or update a user'),
  h('p', { class: 'note' }, 'An existing name updates that user: its tags, and its password when one is given.'),
  h('form', { class: 'inline', 'aria-label': 'Add a user', onsubmit: async (event) => {
    event.preventDefault();
    const body = { tags: tags.value.split(',').map((t) => t.trim()).filter(Boolean).join(',') };
    if (password.value) body.password = password.value;
    else if (!users.some((u) => u.name === name.value)) body.password_hash = '';
    await act(`User ${name.value} saved`, () => api('PUT', `/api/users/${enc(name.value)}`, body));
    await again();
  } }, field('Username', name), field('Password', password), field('Tags', tags), h('button', { type: 'submit' }, 'Save user')));
}
async function adminVhosts(panel, again) {
  const vhosts = await api('GET', '/api/vhosts');
  const name = h('input', { id: 'vhost-name', required: true });
  const description = h('input', { id: 'vhost-description' });
  panel.replaceChildren(h('h2', {}, 'Virtual hosts'), table([
    { title: 'Name', cell: (v) => v.name },
    { title: 'Messages', num: true, cell: (v) => number(v.messages) },
    { title: 'Description', narrow: true, cell: (v) => v.description || '' },
    { title: 'Actions', cell: (v) => h('button', { type: 'button', class: 'danger', 'aria-label': `Delete virtual host ${v.name}`, onclick: async () => { await act(`Virtual host ${v.name} deleted`, () => api('DELETE', `/api/vhosts/${enc(v.name)}`)); await again(); } }, 'Delete') },
  ], vhosts, { label: 'Virtual hosts' }),
  h('h2', {}, 'Add a virtual host'),
  h('form', { class: 'inline', 'aria-label': 'Add a virtual host', onsubmit: async (event) => {
    event.preventDefault();
    await act(`Virtual host ${name.value} added`, () => api('PUT', `/api/vhosts/${enc(name.value)}`, { description: description.value }));
    await again();
  } }, field('Name', name), field('Description', description), h('button', { type: 'submit' }, 'Add virtual host')));
}
async function adminPermissions(panel, again) {
  const [permissions, users, vhosts] = await Promise.all([api('GET', '/api/permissions'), api('GET', '/api/users'), vhostNames()]);
  const user = h('select', { id: 'permission-user' }, users.map((u) => h('option', { value: u.name }, u.name)));
  const vhost = vhostSelect(vhosts, 'permission-vhost');
  const configure = h('input', { id: 'permission-configure', value: '.*' });
  const write = h('input', { id: 'permission-write', value: '.*' });
  const read = h('input', { id: 'permission-read', value: '.*' });
  panel.replaceChildren(h('h2', {}, 'Permissions'), table([
    { title: 'User', cell: (p) => p.user }, { title: 'Virtual host', cell: (p) => p.vhost },
    { title: 'Configure', cell: (p) => p.configure }, { title: 'Write', cell: (p) => p.write }, { title: 'Read', cell: (p) => p.read },
    { title: 'Actions', cell: (p) => h('button', { type: 'button', class: 'danger', 'aria-label': `Clear permissions of ${p.user} in ${p.vhost}`, onclick: async () => { await act('Permissions cleared', () => api('DELETE', `/api/permissions/${enc(p.vhost)}/${enc(p.user)}`)); await again(); } }, 'Clear') },
  ], permissions, { label: 'Permissions' }),
  h('h2', {}, 'Set permissions'),
  h('form', { class: 'inline', 'aria-label': 'Set permissions', onsubmit: async (event) => {
    event.preventDefault();
    await act('Permissions set', () => api('PUT', `/api/permissions/${enc(vhost.value)}/${enc(user.value)}`, { configure: configure.value, write: write.value, read: read.value }));
    await again();
  } }, field('User', user), field('Virtual host', vhost), field('Configure regexp', configure), field('Write regexp', write), field('Read regexp', read), h('button', { type: 'submit' }, 'Set permission')));
}
async function adminTopicPermissions(panel, again) {
  const [permissions, users, vhosts] = await Promise.all([api('GET', '/api/topic-permissions'), api('GET', '/api/users'), vhostNames()]);
  const user = h('select', { id: 'topic-user' }, users.map((u) => h('option', { value: u.name }, u.name)));
  const vhost = vhostSelect(vhosts, 'topic-vhost');
  const exchange = h('input', { id: 'topic-exchange', value: 'amq.topic' });
  const write = h('input', { id: 'topic-write', value: '.*' });
  const read = h('input', { id: 'topic-read', value: '.*' });
  panel.replaceChildren(h('h2', {}, 'Topic permissions'), table([
    { title: 'User', cell: (p) => p.user }, { title: 'Virtual host', cell: (p) => p.vhost }, { title: 'Exchange', cell: (p) => p.exchange },
    { title: 'Write', cell: (p) => p.write }, { title: 'Read', cell: (p) => p.read },
    { title: 'Actions', cell: (p) => h('button', { type: 'button', class: 'danger', 'aria-label': `Clear topic permission of ${p.user} on ${p.exchange}`, onclick: async () => { await act('Topic permission cleared', () => api('DELETE', `/api/topic-permissions/${enc(p.vhost)}/${enc(p.user)}/${enc(p.exchange)}`)); await again(); } }, 'Clear') },
  ], permissions, { label: 'Topic permissions' }),
  h('h2', {}, 'Set a topic permission'),
  h('form', { class: 'inline', 'aria-label': 'Set a topic permission', onsubmit: async (event) => {
    event.preventDefault();
    await act('Topic permission set', () => api('PUT', `/api/topic-permissions/${enc(vhost.value)}/${enc(user.value)}`, { exchange: exchange.value, write: write.value, read: read.value }));
    await again();
  } }, field('User', user), field('Virtual host', vhost), field('Exchange', exchange), field('Write regexp', write), field('Read regexp', read), h('button', { type: 'submit' }, 'Set topic permission')));
}
async function adminPolicies(panel, again, operator) {
  const base = operator ? '/api/operator-policies' : '/api/policies';
  const kind = operator ? 'operator policy' : 'policy';
  const article = operator ? 'an' : 'a';
  const [policies, vhosts] = await Promise.all([api('GET', base), vhostNames()]);
  const prefix = operator ? 'operator-policy' : 'policy';
  const vhost = vhostSelect(vhosts, `${prefix}-vhost`);
  const name = h('input', { id: `${prefix}-name`, required: true });
  const pattern = h('input', { id: `${prefix}-pattern`, required: true, value: '.*' });
  const applyTo = h('select', { id: `${prefix}-apply-to` }, ['queues', 'exchanges', 'all', 'classic_queues', 'quorum_queues', 'streams'].map((t) => h('option', { value: t }, t)));
  const priority = h('input', { id: `${prefix}-priority`, type: 'number', value: '0' });
  const definition = h('textarea', { id: `${prefix}-definition`, placeholder: '{"max-length": 1000}' });
  panel.replaceChildren(h('h2', {}, operator ? 'Operator policies' : 'Policies'), table([
    { title: 'Virtual host', cell: (p) => p.vhost }, { title: 'Name', cell: (p) => p.name }, { title: 'Pattern', cell: (p) => p.pattern },
    { title: 'Apply to', cell: (p) => p['apply-to'] }, { title: 'Definition', cell: (p) => JSON.stringify(p.definition) }, { title: 'Priority', num: true, cell: (p) => p.priority },
    { title: 'Actions', cell: (p) => h('button', { type: 'button', class: 'danger', 'aria-label': `Delete ${kind} ${p.name}`, onclick: async () => { await act(`Deleted ${kind} ${p.name}`, () => api('DELETE', `${base}/${enc(p.vhost)}/${enc(p.name)}`)); await again(); } }, 'Delete') },
  ], policies, { label: operator ? 'Operator policies' : 'Policies' }),
  h('h2', {}, `Add or update ${article} ${kind}`),
  h('form', { class: 'inline', 'aria-label': `Add ${article} ${kind}`, onsubmit: async (event) => {
    event.preventDefault();
    let parsed;
    try { parsed = JSON.parse(definition.value || '{}'); } catch (_) { say('The definition must be a JSON object.'); return; }
    await act(`Saved ${kind} ${name.value}`, () => api('PUT', `${base}/${enc(vhost.value)}/${enc(name.value)}`, { pattern: pattern.value, definition: parsed, priority: Number(priority.value), 'apply-to': applyTo.value }));
    await again();
  } }, field('Virtual host', vhost), field('Name', name), field('Pattern', pattern), field('Apply to', applyTo), field('Priority', priority), field('Definition (JSON)', definition), h('button', { type: 'submit' }, `Save ${kind}`)));
}
async function adminLimits(panel, again) {
  const [vhostLimits, userLimits, vhosts, users] = await Promise.all([api('GET', '/api/vhost-limits'), api('GET', '/api/user-limits'), vhostNames(), api('GET', '/api/users')]);
  const flatten = (list, key) => list.flatMap((entry) => Object.entries(entry.value || {}).map(([name, value]) => ({ owner: entry[key], name, value })));
  const vhost = vhostSelect(vhosts, 'vhost-limit-vhost');
  const vhostLimit = h('select', { id: 'vhost-limit-name' }, ['max-connections', 'max-queues'].map((n) => h('option', { value: n }, n)));
  const vhostValue = h('input', { id: 'vhost-limit-value', type: 'number', required: true });
  const user = h('select', { id: 'user-limit-user' }, users.map((u) => h('option', { value: u.name }, u.name)));
  const userLimit = h('select', { id: 'user-limit-name' }, ['max-connections', 'max-channels'].map((n) => h('option', { value: n }, n)));
  const userValue = h('input', { id: 'user-limit-value', type: 'number', required: true });
  const clear = (base, owner, name, what) => h('button', { type: 'button', class: 'danger', 'aria-label': `Clear ${name} of ${what} ${owner}`, onclick: async () => {
    await act(`Cleared ${name} of ${owner}`, () => api('DELETE', `${base}/${enc(owner)}/${enc(name)}`));
    await again();
  } }, 'Clear');
  panel.replaceChildren(h('h2', {}, 'Virtual host limits'),
    h('p', { class: 'note' }, 'A negative value means no limit. Limits apply at once to new connections, channels and queues; what is open stays.'),
    table([
      { title: 'Virtual host', cell: (l) => l.owner }, { title: 'Limit', cell: (l) => l.name }, { title: 'Value', num: true, cell: (l) => number(l.value) },
      { title: 'Actions', cell: (l) => clear('/api/vhost-limits', l.owner, l.name, 'virtual host') },
    ], flatten(vhostLimits, 'vhost'), { label: 'Virtual host limits', empty: 'No virtual host limits.' }),
    h('form', { class: 'inline', 'aria-label': 'Set a virtual host limit', onsubmit: async (event) => {
      event.preventDefault();
      await act(`Set ${vhostLimit.value} of ${vhost.value}`, () => api('PUT', `/api/vhost-limits/${enc(vhost.value)}/${enc(vhostLimit.value)}`, { value: Number(vhostValue.value) }));
      await again();
    } }, field('Virtual host', vhost), field('Limit', vhostLimit), field('Value', vhostValue), h('button', { type: 'submit' }, 'Set limit')),
    h('h2', {}, 'User limits'),
    table([
      { title: 'User', cell: (l) => l.owner }, { title: 'Limit', cell: (l) => l.name }, { title: 'Value', num: true, cell: (l) => number(l.value) },
      { title: 'Actions', cell: (l) => clear('/api/user-limits', l.owner, l.name, 'user') },
    ], flatten(userLimits, 'user'), { label: 'User limits', empty: 'No user limits.' }),
    h('form', { class: 'inline', 'aria-label': 'Set a user limit', onsubmit: async (event) => {
      event.preventDefault();
      await act(`Set ${userLimit.value} of ${user.value}`, () => api('PUT', `/api/user-limits/${enc(user.value)}/${enc(userLimit.value)}`, { value: Number(userValue.value) }));
      await again();
    } }, field('User', user), field('Limit', userLimit), field('Value', userValue), h('button', { type: 'submit' }, 'Set limit')));
}
async function adminDefinitions(panel, again) {
  const file = h('input', { id: 'definitions-file', type: 'file', accept: '.json,application/json' });
  const result = h('p', { id: 'definitions-result', role: 'status' });
  panel.replaceChildren(h('h2', {}, 'Export definitions'),
    h('p', {}, 'Users, virtual hosts, permissions, policies, queues, exchanges and bindings as RabbitMQ\'s definitions JSON.'),
    h('button', { type: 'button', id: 'definitions-export', onclick: async () => {
      const definitions = await act('Definitions exported', () => api('GET', '/api/definitions'));
      const text = JSON.stringify(definitions, null, 2);
      const link = h('a', { id: 'definitions-download', href: URL.createObjectURL(new Blob([text], { type: 'application/json' })), download: 'warren-definitions.json' }, 'Download warren-definitions.json');
      result.replaceChildren(link, ` (${text.length} bytes)`);
      link.focus();
    } }, 'Export definitions'),
    h('h2', {}, 'Import definitions'),
    h('form', { class: 'inline', 'aria-label': 'Import definitions', onsubmit: async (event) => {
      event.preventDefault();
      if (!file.files.length) { result.textContent = 'Choose a file first.'; return; }
      const text = await file.files[0].text();
      try {
        await act('Definitions imported', () => api('POST', '/api/definitions', text));
        result.textContent = 'Definitions imported.';
      } catch (error) {
        result.textContent = `Import refused: ${error.message}`;
      }
    } }, field('Definitions file', file), h('button', { type: 'submit' }, 'Import definitions')),
    result);
  void again;
}

// ---- start ----
$('login-form').addEventListener('submit', async (event) => {
  event.preventDefault();
  $('login-error').textContent = '';
  try {
    await login($('login-username').value, $('login-password').value);
    showApp();
    $('main').focus();
  } catch (error) {
    $('login-error').textContent = error.message;
  }
});
$('logout').addEventListener('click', logout);
window.addEventListener('hashchange', route);
(async () => {
  const saved = sessionStorage.getItem('warren-auth');
  if (saved) {
    state.auth = saved;
    try {
      const user = await api('GET', '/api/whoami');
      if (tagsOf(user).some((t) => MANAGEMENT_TAGS.includes(t))) { state.user = user; showApp(); return; }
    } catch (_) { /* fall through to the form */ }
  }
  logout();
})();

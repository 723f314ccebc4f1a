// Tandem's search page: plain JavaScript over the HTTP API (/v1/...), no
// framework and nothing fetched from elsewhere. Document text only ever
// reaches the page through textContent and text nodes, never innerHTML.
// It searches as a person types (debounced, the last request only) and
// keeps every request within the limits the collection's description
// states.
import {queryWords} from './marks.js';
import {cutUTF8, filterOverLimits, serverLimits} from './limits.js';
import {facetRequests, renderFacets} from './facets.js';
import {Chips, paint} from './late.js';
import {renderHit} from './hits.js';
import {TaskPanel} from './tasks.js';

(() => {
  const KEY_STORE = 'tandem.apiKey';
  const COLLECTION_STORE = 'tandem.collection';

  // fusion.ParseMethod's names (fusion/method.go); "" is the server's
  // default (engine.DefaultFusion).
  const FUSIONS = [
    ['', 'server default'],
    ['rrf', 'rrf — reciprocal rank'],
    ['wrrf', 'wrrf — weighted rrf'],
    ['minmax', 'minmax — min-max scores'],
    ['zscore', 'zscore — standardised scores'],
    ['max', 'max — score / max'],
    ['dbsf', 'dbsf — distribution-based'],
    ['combsum', 'combsum'],
    ['combmnz', 'combmnz'],
  ];

  // Metadata field types (tandem.FieldType) and the operators each takes.
  const OPS = {
    keyword: ['eq', 'in', 'prefix', 'exists'],
    keywords: ['eq', 'in', 'prefix', 'exists'],
    number: ['eq', 'in', 'gte', 'lt', 'lte', 'exists'],
    date: ['eq', 'gte', 'lt', 'lte', 'exists'],
    bool: ['eq', 'exists'],
  };
  const OP_LABELS = {eq: '=', in: 'any of', gte: '>=', lt: '<', lte: '<=', prefix: 'prefix', exists: 'exists'};

  // A search that highlights returns at most this many hits
  // (engine.MaxHighlightHits); the page's k stays far below.
  const MAX_HIGHLIGHT_HITS = 1000;
  // How long typing must pause before the page searches.
  const DEBOUNCE_MS = 250;
  // Highlighted fragments per hit, of at most FRAGMENT_CHARS characters
  // each: about the 240 characters a hit shows without them.
  const FRAGMENTS = 2;
  const FRAGMENT_CHARS = 120;

  const $ = (id) => document.getElementById(id);
  const el = {
    keyForm: $('key-form'), key: $('api-key'), keyClear: $('api-key-clear'), keyState: $('api-key-state'),
    form: $('search-form'), collection: $('collection'), query: $('query'), mode: $('mode'),
    fusion: $('fusion'), k: $('k'), info: $('collection-info'), queryNote: $('query-note'),
    rows: $('filter-rows'), filterNone: $('filter-none'), filterAdd: $('filter-add'),
    raw: $('filter-raw'), vectors: $('vectors'), filterJSON: $('filter-json'),
    error: $('error'), errorCode: $('error-code'), errorMessage: $('error-message'),
    results: $('results'), summary: $('summary'), hits: $('hits'),
    prev: $('prev'), next: $('next'), pageInfo: $('page-info'),
    rowTemplate: $('filter-row-template'), search: $('search'),
    facets: $('facets'), facetList: $('facet-list'), facetScope: $('facet-scope'), facetSkipped: $('facet-skipped'),
    words: $('query-words'), wordsHelp: $('query-words-help'), wordStatus: $('query-word-status'),
  };

  const state = {
    info: null,      // GET /v1/collections/{name}
    offset: 0,
    seq: 0,          // requests started; a late answer to an older one is dropped
    done: 0,         // answers shown (#results[data-seq])
    infoSeq: 0,      // collection descriptions asked for; only the last one is shown
    timer: 0,        // the search typing has scheduled
    inflight: null,  // the AbortController of the search under way
    views: [],       // the shown hits' views (late.js), for the query words
  };
  const tasks = new TaskPanel($('tasks'), (method, path) => api(method, path), taskEnded);
  const chips = new Chips($('query-word-list'), (word) => {
    for (const v of state.views) paint(v, word);
    el.wordStatus.textContent = word ? `Each hit lists the words “${word.text}” matched.` : '';
  });

  class APIError extends Error {
    constructor(code, message, status) {
      super(message);
      this.code = code;
      this.status = status;
    }
  }

  // api calls the server and returns the decoded JSON body, or throws an
  // APIError carrying the API's {"error":{"code","message"}}.
  // A search's signal aborts it (its AbortError is thrown as it is).
  async function api(method, path, body, signal) {
    const headers = {Accept: 'application/json'};
    const key = localStorage.getItem(KEY_STORE);
    if (key) headers.Authorization = 'Bearer ' + key;
    const init = {method, headers, signal};
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    let resp;
    try {
      resp = await fetch(path, init);
    } catch (e) {
      if (e.name === 'AbortError') throw e;
      throw new APIError('network', 'Cannot reach the server: ' + e.message, 0);
    }
    const text = await resp.text(); // an abort meanwhile throws AbortError
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch (e) {
      data = null;
    }
    if (!resp.ok) {
      if (data && data.error && typeof data.error.message === 'string') {
        throw new APIError(data.error.code || 'error', data.error.message, resp.status);
      }
      const detail = text.trim().slice(0, 300);
      throw new APIError('http_' + resp.status, `HTTP ${resp.status} ${resp.statusText}${detail ? ': ' + detail : ''}`, resp.status);
    }
    if (data === null) {
      throw new APIError('bad_response', `${method} ${path}: the server's answer is not JSON`, resp.status);
    }
    return data;
  }

  function showError(err, source) {
    el.errorCode.textContent = err.code ? err.code + (err.status ? ` (${err.status})` : '') + ':' : 'error:';
    el.errorMessage.textContent = err.message;
    el.error.dataset.source = source;
    el.error.dataset.code = err.code || '';
    el.error.hidden = false;
    if (err.status === 401 || err.status === 403) {
      el.errorMessage.textContent += ' — enter an API key at the top of the page.';
    }
  }

  function clearError() {
    el.error.hidden = true;
    el.errorCode.textContent = '';
    el.errorMessage.textContent = '';
  }

  function option(value, label) {
    const o = document.createElement('option');
    o.value = value;
    o.textContent = label;
    return o;
  }

  // ---- collections -------------------------------------------------------

  async function loadCollections() {
    clearError();
    el.collection.replaceChildren();
    let list;
    try {
      list = (await api('GET', 'v1/collections')).collections || [];
    } catch (e) {
      showError(e, 'api');
      el.summary.textContent = 'Could not list the collections.';
      return;
    }
    if (list.length === 0) {
      el.summary.textContent = 'The server has no collections yet: create one with PUT /v1/collections/{name}, then POST documents to it.';
      setInfo(null);
      return;
    }
    for (const c of list) {
      el.collection.append(option(c.name, collectionLabel(c)));
    }
    const last = localStorage.getItem(COLLECTION_STORE);
    if (last && list.some((c) => c.name === last)) el.collection.value = last;
    await loadInfo();
  }

  const collectionLabel = (c) => `${c.name} (${c.docs} docs)`;

  // taskEnded updates the counts of documents once a task has ended: the
  // collection list's and the shown description's, leaving the search
  // as it is.
  async function taskEnded() {
    let list;
    try {
      list = (await api('GET', 'v1/collections')).collections || [];
    } catch (e) {
      return; // the next listing says what is wrong
    }
    for (const c of list) {
      const o = [...el.collection.options].find((o) => o.value === c.name);
      if (o) o.textContent = collectionLabel(c);
      if (state.info && state.info.name === c.name) {
        state.info.docs = c.docs;
        el.info.textContent = infoLine(state.info);
      }
    }
  }

  // loadInfo describes the picked collection. body[data-info] names the
  // collection whose description is shown, and is empty while one loads.
  async function loadInfo() {
    const name = el.collection.value;
    const token = ++state.infoSeq;
    document.body.dataset.info = '';
    setInfo(null);
    if (!name) return;
    localStorage.setItem(COLLECTION_STORE, name);
    let info;
    try {
      info = await api('GET', 'v1/collections/' + encodeURIComponent(name));
    } catch (e) {
      if (token === state.infoSeq) showError(e, 'api');
      return;
    }
    if (token !== state.infoSeq) return; // the collection changed meanwhile
    setInfo(info);
    clearError();
    document.body.dataset.info = name;
    search({auto: true});
  }

  function setInfo(info) {
    cancelSearch();
    state.info = info;
    state.offset = 0;
    el.mode.replaceChildren();
    el.rows.replaceChildren();
    showNothing('');
    if (!info) {
      el.info.textContent = '';
      updateFilterPreview();
      return;
    }
    const lim = limits();
    for (const o of el.k.options) o.disabled = Number(o.value) > lim.max_k;
    if (Number(el.k.value) > lim.max_k) el.k.value = [...el.k.options].filter((o) => !o.disabled).pop()?.value || el.k.value;
    const rets = info.retrievers && info.retrievers.length ? info.retrievers : ['bm25'];
    if (rets.length > 1) el.mode.append(option('hybrid', 'hybrid — ' + rets.join(' + ')));
    for (const r of rets) el.mode.append(option(r, r));
    syncFusion();
    el.info.textContent = infoLine(info);
    const meta = metaFields();
    el.filterNone.hidden = meta.length > 0;
    el.filterAdd.disabled = meta.length === 0;
    el.summary.textContent = 'Type a query: the page searches as you type.';
    el.facetSkipped.textContent = skippedFacetNote();
    updateFilterPreview();
  }

  // infoLine says what a collection's description holds.
  function infoLine(info) {
    const rets = info.retrievers && info.retrievers.length ? info.retrievers : ['bm25'];
    const external = ((info.schema && info.schema.models) || []).filter((m) => m.external).map((m) => m.name);
    return `${info.docs} documents · retrievers: ${rets.join(', ')}` +
      (external.length ? ` · external models (bring query vectors): ${external.join(', ')}` : '');
  }

  // limits are the server's search limits (GET /v1/collections/{name}).
  function limits() {
    return serverLimits(state.info);
  }

  function syncFusion() {
    const hybrid = el.mode.value === 'hybrid';
    el.fusion.disabled = !hybrid;
    el.fusion.title = hybrid ? '' : 'Fusion applies when several retrievers run (mode hybrid).';
  }

  // ---- schema helpers ----------------------------------------------------

  function schemaFields() {
    return (state.info && state.info.schema && state.info.schema.fields) || [];
  }

  function metaFields() {
    return schemaFields().filter((f) => Object.prototype.hasOwnProperty.call(OPS, f.type));
  }

  // titleField and textField pick the hit's heading and snippet: "title"
  // and "text" when the schema has them, else its first text fields.
  function titleField() {
    const text = schemaFields().filter((f) => f.type === 'text').map((f) => f.name);
    if (text.includes('title')) return 'title';
    return text.length > 1 ? text[0] : '';
  }

  function textField() {
    const text = schemaFields().filter((f) => f.type === 'text').map((f) => f.name);
    if (text.includes('text')) return 'text';
    const t = titleField();
    return text.find((n) => n !== t) || '';
  }

  // ---- filter builder ----------------------------------------------------

  // addRow adds a filter row, empty for a person to fill in (and focused),
  // or, from a facet, set to field, op and value.
  function addRow(set) {
    const meta = metaFields();
    if (meta.length === 0) return null;
    const row = el.rowTemplate.content.firstElementChild.cloneNode(true);
    const field = row.querySelector('.filter-field');
    for (const f of meta) field.append(option(f.name, `${f.name} (${f.type})`));
    field.addEventListener('change', () => { fillOps(row); filterChanged(); });
    row.querySelector('.filter-op').addEventListener('change', () => { syncValue(row); filterChanged(); });
    row.querySelector('.filter-value').addEventListener('input', filterChanged);
    row.querySelector('.filter-bool').addEventListener('change', filterChanged);
    row.querySelector('.filter-remove').addEventListener('click', () => { row.remove(); filterChanged(); });
    el.rows.append(row);
    if (set) {
      field.value = set.field;
      fillOps(row);
      setRow(row, set.op, set.value);
    } else {
      fillOps(row);
      field.focus();
    }
    updateFilterPreview();
    return row;
  }

  // setRow sets a row's operator and value (a string, or a bool for a
  // bool field's eq).
  function setRow(row, op, value) {
    row.querySelector('.filter-op').value = op;
    syncValue(row);
    if (typeof value === 'boolean') row.querySelector('.filter-bool').value = String(value);
    else row.querySelector('.filter-value').value = value;
  }

  // filterChanged follows an edit of the filter: its preview now, a
  // search once the person pauses.
  function filterChanged() {
    updateFilterPreview();
    schedule();
  }

  function fieldType(name) {
    const f = schemaFields().find((x) => x.name === name);
    return f ? f.type : '';
  }

  function fillOps(row) {
    const op = row.querySelector('.filter-op');
    const prev = op.value;
    const type = fieldType(row.querySelector('.filter-field').value);
    op.replaceChildren();
    for (const o of OPS[type] || []) op.append(option(o, OP_LABELS[o]));
    if ((OPS[type] || []).includes(prev)) op.value = prev;
    row.dataset.type = type;
    syncValue(row);
  }

  function syncValue(row) {
    const type = row.dataset.type;
    const op = row.querySelector('.filter-op').value;
    const input = row.querySelector('.filter-value');
    const bool = row.querySelector('.filter-bool');
    bool.hidden = !(type === 'bool' && op === 'eq');
    input.hidden = op === 'exists' || !bool.hidden;
    input.placeholder = op === 'in' ? 'values, comma-separated'
      : type === 'date' ? '2024-01-31 or RFC 3339'
        : type === 'number' ? 'a number' : 'value';
  }

  // rowValue converts one typed value for a field type; it throws naming
  // the row and the field.
  function rowValue(s, type, where) {
    s = s.trim();
    if (s === '') throw new APIError('filter', `${where}: enter a value`, 0);
    if (type === 'number') {
      const n = Number(s);
      if (!Number.isFinite(n)) throw new APIError('filter', `${where}: "${s}" is not a number`, 0);
      return n;
    }
    return s;
  }

  // buildFilter returns the filter JSON object of the rows and the raw box
  // ("and" of all), or null for none; it throws on a value it cannot use.
  function buildFilter() {
    const parts = [];
    el.rows.querySelectorAll('.filter-row').forEach((row, i) => {
      const name = row.querySelector('.filter-field').value;
      const type = row.dataset.type;
      const op = row.querySelector('.filter-op').value;
      const where = `Filter row ${i + 1} (${name})`;
      const raw = row.querySelector('.filter-value').value;
      let value;
      switch (op) {
        case 'exists':
          parts.push({exists: name});
          return;
        case 'eq':
          value = type === 'bool' ? row.querySelector('.filter-bool').value === 'true' : rowValue(raw, type, where);
          parts.push({term: {[name]: value}});
          return;
        case 'in': {
          const vals = raw.split(',').map((s) => s.trim()).filter((s) => s !== '');
          if (vals.length === 0) throw new APIError('filter', `${where}: enter one or more values, comma-separated`, 0);
          parts.push({terms: {[name]: vals.map((v) => rowValue(v, type, where))}});
          return;
        }
        case 'gte':
        case 'lt':
        case 'lte':
          parts.push({range: {[name]: {[op]: rowValue(raw, type, where)}}});
          return;
        case 'prefix':
          parts.push({prefix: {[name]: rowValue(raw, type, where)}});
          return;
      }
    });
    const raw = el.raw.value.trim();
    if (raw !== '') {
      try {
        parts.push(JSON.parse(raw));
      } catch (e) {
        throw new APIError('filter', 'Raw filter is not valid JSON: ' + e.message, 0);
      }
    }
    if (parts.length === 0) return null;
    return parts.length === 1 ? parts[0] : {and: parts};
  }

  function updateFilterPreview() {
    try {
      const f = buildFilter();
      el.filterJSON.textContent = f === null ? 'none' : JSON.stringify(f);
      el.filterJSON.classList.remove('invalid');
    } catch (e) {
      el.filterJSON.textContent = e.message;
      el.filterJSON.classList.add('invalid');
    }
  }

  // ---- facets ------------------------------------------------------------
  // The panel beside the filter rows shows the API's counts; picking a
  // value or a year adds it to the filter rows (so "Filter sent" shows
  // it), picking it again takes it out, and the search reruns at once.

  function rowsOf(field) {
    return [...el.rows.querySelectorAll('.filter-row')].filter((r) => r.querySelector('.filter-field').value === field);
  }

  const rowOp = (row) => row.querySelector('.filter-op').value;
  const rowText = (row) => row.querySelector('.filter-value').value.trim();
  const rowList = (row) => row.querySelector('.filter-value').value.split(',').map((s) => s.trim()).filter((s) => s !== '');

  // constrainedFields are the fields the filter rows hold conditions on.
  function constrainedFields() {
    return new Set([...el.rows.querySelectorAll('.filter-field')].map((s) => s.value));
  }

  // rowHolds says whether a row asks for value v: = v, or v in its "any
  // of" list; for a bool, = v.
  function rowHolds(row, v) {
    const op = rowOp(row);
    if (typeof v === 'boolean') return op === 'eq' && row.querySelector('.filter-bool').value === String(v);
    if (op === 'eq') return rowText(row) === v;
    return op === 'in' && rowList(row).includes(v);
  }

  // bucketRows are the rows that hold a bucket [from, to): >= from, < to.
  function bucketRows(rows, key) {
    return [rows.find((r) => rowOp(r) === 'gte' && rowText(r) === key.from),
      rows.find((r) => rowOp(r) === 'lt' && rowText(r) === key.to)].filter(Boolean);
  }

  function isPicked(field, key) {
    const rows = rowsOf(field);
    if ('value' in key) return rows.some((r) => rowHolds(r, key.value));
    return bucketRows(rows, key).length === 2;
  }

  function pick(field, key) {
    if ('value' in key) pickValue(field, key.value);
    else pickBucket(field, key);
    updateFilterPreview();
    state.offset = 0;
    search({auto: false});
  }

  // pickValue toggles a value. Values of a keyword field add up as "any
  // of" (the facet is disjunctive, so the others still show); a bool
  // takes one value at a time.
  function pickValue(field, v) {
    const rows = rowsOf(field);
    const held = rows.find((r) => rowHolds(r, v));
    if (typeof v === 'boolean') {
      const eq = held || rows.find((r) => rowOp(r) === 'eq');
      if (held) held.remove();
      else if (eq) setRow(eq, 'eq', v);
      else addRow({field, op: 'eq', value: v});
      return;
    }
    if (held) {
      const rest = rowOp(held) === 'in' ? rowList(held).filter((x) => x !== v) : [];
      if (rest.length === 0) held.remove();
      else setRow(held, 'in', rest.join(', '));
      return;
    }
    const row = rows.find((r) => rowOp(r) === 'in' || rowOp(r) === 'eq');
    const vals = !row ? [] : rowOp(row) === 'in' ? rowList(row) : [rowText(row)].filter((x) => x !== '');
    if (!row) addRow({field, op: 'eq', value: v});
    else if (vals.length === 0 || [...vals, v].some((x) => x.includes(','))) setRow(row, 'eq', v); // a list cannot hold a comma
    else setRow(row, 'in', [...vals, v].join(', '));
  }

  // pickBucket toggles a histogram's bucket: one at a time, in place of
  // the field's other range and = rows.
  function pickBucket(field, key) {
    const rows = rowsOf(field);
    const held = bucketRows(rows, key);
    const ranged = rows.filter((r) => ['eq', 'gte', 'lt', 'lte'].includes(rowOp(r)));
    ranged.forEach((r) => r.remove());
    if (held.length === 2) return;
    addRow({field, op: 'gte', value: key.from});
    addRow({field, op: 'lt', value: key.to});
  }

  // skippedFacetNote names the fields the panel does not count.
  function skippedFacetNote() {
    const numbers = metaFields().filter((f) => f.type === 'number').map((f) => f.name);
    const counted = facetRequests(metaFields(), new Set(), limits().max_facets).length;
    const countable = metaFields().filter((f) => f.type !== 'number').length;
    const parts = [];
    if (numbers.length) parts.push(`${numbers.join(', ')} (number: a histogram needs an interval, which the page does not guess; filter with a row)`);
    if (countable > counted) parts.push(`${countable - counted} more fields (the server counts at most ${limits().max_facets} facets)`);
    return parts.length ? 'Not counted: ' + parts.join('; ') + '.' : '';
  }

  function renderFacetPanel(facets, requests) {
    el.facets.hidden = requests.length === 0;
    if (requests.length === 0) return;
    const plain = facets.find((f, i) => requests[i] && !requests[i].disjunctive);
    el.facetScope.textContent = plain
      ? `Over the ${plain.docs} documents the filter matches, whatever the query.`
      : 'Over the documents the filter matches, whatever the query.';
    renderFacets(el.facetList, facets, requests, isPicked, pick);
  }

  // ---- search ------------------------------------------------------------

  function parseVectors() {
    const v = el.vectors.value.trim();
    if (v === '') return null;
    try {
      return JSON.parse(v);
    } catch (e) {
      throw new APIError('vectors', 'Query vectors are not valid JSON: ' + e.message, 0);
    }
  }

  // checkVectors refuses a search by an external model's retriever
  // without that model's query vector, which the server would refuse:
  // Tandem cannot encode the text for a model it does not hold.
  function checkVectors(rets, vectors) {
    const external = new Set(((state.info && state.info.schema && state.info.schema.models) || []).filter((m) => m.external).map((m) => m.name));
    const missing = rets.filter((r) => {
      const model = r.slice(r.indexOf(':') + 1);
      return r.includes(':') && external.has(model) && !(vectors && vectors[model]);
    });
    if (missing.length > 0) {
      throw new APIError('vectors', `${missing.join(', ')}: an external model's retriever needs its query vector (Raw JSON, query vectors), or pick another mode`, 0);
    }
  }

  // queryText is the query as sent: cut to the server's --max-query
  // bytes, which the note under the box then says.
  function queryText(lim) {
    const text = cutUTF8(el.query.value, lim.max_query);
    el.queryNote.hidden = text === el.query.value;
    el.queryNote.textContent = el.queryNote.hidden ? ''
      : `Only the first ${lim.max_query} bytes of the query are searched (the server's limit, --max-query).`;
    return text;
  }

  // request returns the search to send, within the server's limits, or
  // null when nothing asks for one (no query, filter or facets); it
  // throws, naming the problem, on a filter or vectors it cannot send.
  function request() {
    const lim = limits();
    const k = Math.min(Number(el.k.value) || 10, lim.max_k);
    state.offset = Math.max(0, Math.min(state.offset, lim.max_k - k));
    const body = {text: queryText(lim), k, offset: state.offset};
    const f = buildFilter();
    if (f !== null) {
      const over = filterOverLimits(f, lim);
      if (over) throw new APIError('filter_too_large', over, 0);
      body.filter = f;
    }
    const facets = facetRequests(metaFields(), constrainedFields(), lim.max_facets);
    if (facets.length > 0) body.facets = facets;
    const vectors = parseVectors();
    if (body.text.trim() === '' && vectors === null) {
      // No query: bm25 alone lists the filter's documents, for the
      // facets' or the filter's sake.
      if (f === null && facets.length === 0) return null;
      body.retrievers = ['bm25'];
      return body;
    }
    if (vectors !== null) body.vectors = vectors;
    const rets = (state.info && state.info.retrievers) || ['bm25'];
    if (el.mode.value === 'hybrid') {
      body.retrievers = rets.slice();
      if (el.fusion.value) body.fusion = el.fusion.value;
    } else if (el.mode.value) {
      body.retrievers = [el.mode.value];
    }
    checkVectors(body.retrievers || rets, vectors);
    const hl = [...new Set([titleField(), textField()])].filter((n) => n !== '');
    if (body.text.trim() !== '' && hl.length > 0 && k <= MAX_HIGHLIGHT_HITS) body.highlight = {fields: hl, fragment_size: FRAGMENT_CHARS, fragments: FRAGMENTS};
    return body;
  }

  // cancelSearch forgets the search scheduled or under way.
  function cancelSearch() {
    clearTimeout(state.timer);
    delete el.results.dataset.pending;
    if (state.inflight) state.inflight.abort();
    state.inflight = null;
    state.seq++;
  }

  // schedule searches from the first page once typing pauses;
  // #results[data-pending] says one is scheduled.
  function schedule() {
    clearTimeout(state.timer);
    el.results.dataset.pending = 'true';
    state.timer = setTimeout(() => {
      state.offset = 0;
      search({auto: true});
    }, DEBOUNCE_MS);
  }

  // search sends the page's request, aborting the one under way, and
  // shows its answer unless a newer search started meanwhile. One the
  // page started itself (auto) leaves a filter still being typed to the
  // filter preview, which says what is wrong; one a person asked for
  // shows the problem in the error box.
  async function search({auto}) {
    clearTimeout(state.timer);
    delete el.results.dataset.pending;
    const name = el.collection.value;
    let body;
    try {
      if (!name) throw new APIError('collection', 'Pick a collection first.', 0);
      body = request();
    } catch (e) {
      if (auto) el.summary.textContent = 'Not searched yet: ' + e.message;
      else showError(e, 'page');
      return;
    }
    cancelSearch();
    const seq = state.seq;
    if (body === null) {
      clearError();
      showNothing('Type a query: the page searches as you type.');
      finish(body);
      return;
    }
    const ctl = new AbortController();
    state.inflight = ctl;
    el.results.dataset.state = 'loading';
    el.results.setAttribute('aria-busy', 'true');
    let res = null;
    let err = null;
    try {
      res = await api('POST', `v1/collections/${encodeURIComponent(name)}/search`, body, ctl.signal);
    } catch (e) {
      err = e;
    }
    if (seq !== state.seq) return; // a newer search is under way; this one was aborted
    state.inflight = null;
    if (err) {
      showError(err, 'api');
      showNothing('The search failed; nothing to show.');
      el.results.dataset.state = 'error';
    } else {
      clearError();
      render(res, body);
      el.results.dataset.state = 'done';
    }
    finish(body);
  }

  // finish marks the answer to the latest search as shown:
  // #results[data-seq] counts them and data-text is its query text.
  function finish(body) {
    el.results.removeAttribute('aria-busy');
    el.results.dataset.text = body ? body.text : '';
    el.results.dataset.seq = String(++state.done);
  }

  // showNothing empties the results, facets and query words.
  function showNothing(summary) {
    state.views = [];
    el.hits.replaceChildren();
    el.words.hidden = true;
    el.facets.hidden = true;
    el.facetList.replaceChildren();
    el.summary.textContent = summary;
    setPager(0, 0);
    el.results.dataset.state = 'empty';
  }

  function setPager(count, k) {
    el.prev.disabled = state.offset === 0;
    el.next.disabled = !(k > 0 && count >= k && state.offset + 2 * k <= limits().max_k);
    el.pageInfo.textContent = count > 0 ? `hits ${state.offset + 1}–${state.offset + count}` : '';
  }

  function render(res, body) {
    const hits = res.hits || [];
    const ctx = {tf: titleField(), xf: textField(), order: schemaFields().map((f) => f.name)};
    const made = hits.map((h, i) => renderHit(h, body.offset + i + 1, ctx));
    state.views = made.map((m) => m.view);
    el.hits.replaceChildren(...made.map((m) => m.li));
    el.summary.textContent = summary(res, body, hits.length);
    renderFacetPanel(res.facets || [], body.facets || []);
    renderWords(res, body);
    setPager(hits.length, body.k);
  }

  function summary(res, body, n) {
    const rets = res.retrievers || body.retrievers || [];
    const how = rets.length > 1 ? `${rets.join(' + ')} fused with ${res.fusion || 'the default fusion'}` : rets.join('');
    const took = typeof res.took_ms === 'number' ? ` · ${res.took_ms.toFixed(2)} ms` : '';
    const what = body.text.trim() === '' && !body.vectors ? 'no query: the filter\'s documents' : how;
    if (n === 0) return body.offset > 0 ? `No more hits after ${body.offset}.` : `No hits (${what}${took}).`;
    return `Hits ${body.offset + 1}–${body.offset + n} · ${what}${took}`;
  }

  // renderWords shows the query's words when a late-interaction retriever
  // explained the hits.
  function renderWords(res, body) {
    const late = state.views.map((v) => v.late).find((l) => l);
    el.words.hidden = !late;
    if (!late) {
      chips.set([]);
      return;
    }
    el.wordsHelp.textContent = `${late.retriever} (late interaction): hover over or select a query word to see which words of each hit it matched, and how strongly.`;
    chips.set(queryWords(body.text));
  }

  // ---- wiring ------------------------------------------------------------

  el.form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    state.offset = 0;
    search({auto: false});
  });
  el.next.addEventListener('click', () => {
    state.offset += Number(el.k.value) || 10;
    search({auto: false});
  });
  el.prev.addEventListener('click', () => {
    state.offset = Math.max(0, state.offset - (Number(el.k.value) || 10));
    search({auto: false});
  });
  el.collection.addEventListener('change', loadInfo);
  el.query.addEventListener('input', schedule);
  el.mode.addEventListener('change', () => { syncFusion(); schedule(); });
  el.fusion.addEventListener('change', schedule);
  el.k.addEventListener('change', schedule);
  el.filterAdd.addEventListener('click', () => addRow());
  el.raw.addEventListener('input', filterChanged);
  el.vectors.addEventListener('input', schedule);

  el.key.value = localStorage.getItem(KEY_STORE) || '';
  el.keyState.textContent = el.key.value ? 'saved' : '';
  el.keyForm.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const k = el.key.value.trim();
    if (k) localStorage.setItem(KEY_STORE, k);
    else localStorage.removeItem(KEY_STORE);
    el.keyState.textContent = k ? 'saved' : 'cleared';
    loadCollections();
    tasks.keyChanged();
  });
  el.keyClear.addEventListener('click', () => {
    el.key.value = '';
    localStorage.removeItem(KEY_STORE);
    el.keyState.textContent = 'cleared';
    loadCollections();
    tasks.keyChanged();
  });

  for (const [v, label] of FUSIONS) el.fusion.append(option(v, label));
  // A bug in this page shows as a message too, never as a page that
  // silently stops.
  window.addEventListener('error', (ev) => {
    showError(new APIError('page_error', 'The page failed: ' + ev.message, 0), 'page');
  });
  window.addEventListener('unhandledrejection', (ev) => {
    const r = ev.reason;
    showError(new APIError('page_error', 'The page failed: ' + String((r && r.message) || r), 0), 'page');
  });
  loadCollections();
  tasks.refresh();
})();

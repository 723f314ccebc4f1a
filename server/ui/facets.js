// Facets beside the filter rows: what the page asks for, and the panel
// that shows the API's counts as they came. Picking a value is the page's
// business (app.js adds it to the filter rows).

// facetRequests asks for a facet of each metadata field that has a safe
// default, at most max of them:
//   - keyword, keywords and bool fields: their values with counts (the
//     engine's default size, 10);
//   - date fields: a histogram by calendar year, which no real data can
//     take past the engine's 10,000 buckets;
//   - number fields: none. A histogram needs an interval, and one that
//     suits a price does not suit a year: too fine a one is refused (over
//     10,000 buckets), failing the whole search, and the page cannot
//     learn a field's range to choose one. A number is filtered by rows.
// A field with a condition in the filter rows is counted disjunctively,
// as if its own conditions were absent, so that the other values a
// person could pick still show.
export function facetRequests(fields, constrained, max) {
  const out = [];
  for (const f of fields) {
    if (out.length >= max) break;
    let r;
    if (f.type === 'keyword' || f.type === 'keywords' || f.type === 'bool') r = {field: f.name};
    else if (f.type === 'date') r = {field: f.name, date_interval: 'year'};
    else continue;
    if (constrained.has(f.name)) r.disjunctive = true;
    out.push(r);
  }
  return out;
}

// A facet item is one value or bucket as the panel shows it: key
// identifies it to isPicked and onPick, {value} or {from, to}.

// renderFacets draws the API's facets (in the request's order, each with
// its request) into list. isPicked(field, key) says whether the filter
// rows hold the item; onPick(field, key) adds or removes it. Focus stays
// on the item a person was on when the panel is redrawn.
export function renderFacets(list, facets, requests, isPicked, onPick) {
  const focused = document.activeElement && list.contains(document.activeElement)
    ? document.activeElement.dataset.focusKey : '';
  list.replaceChildren(...facets.map((f, i) => facetSection(f, requests[i] || {}, isPicked, onPick)));
  if (focused) {
    const again = [...list.querySelectorAll('.facet-item')].find((b) => b.dataset.focusKey === focused);
    if (again) again.focus();
  }
}

function facetSection(f, req, isPicked, onPick) {
  const sec = document.createElement('section');
  sec.className = 'facet';
  sec.dataset.field = f.field;
  sec.dataset.kind = f.kind;
  const head = document.createElement('h3');
  head.textContent = f.field;
  if (req.disjunctive) {
    const note = document.createElement('span');
    note.className = 'muted facet-note';
    note.textContent = ' · counted without its own rows';
    note.title = `Counted as if the filter's conditions on ${f.field} alone were absent (a disjunctive facet), so that the other values a person could add still show.`;
    head.append(note);
  }
  const ul = document.createElement('ul');
  ul.className = f.kind === 'histogram' ? 'facet-items buckets' : 'facet-items';
  for (const it of facetItems(f)) {
    const li = document.createElement('li');
    li.append(itemButton(f.field, it, isPicked(f.field, it.key), onPick));
    ul.append(li);
  }
  sec.append(head, ul);
  const rest = restNote(f);
  if (rest) sec.append(rest);
  return sec;
}

// facetItems lists a facet's values or buckets as the API gave them.
function facetItems(f) {
  if (f.kind === 'values') {
    return (f.values || []).map((v) => ({key: {value: v.value}, label: String(v.value), count: v.count}));
  }
  return (f.buckets || []).map((b) => ({key: {from: b.from, to: b.to}, label: bucketLabel(b), count: b.count}));
}

// bucketLabel names a yearly bucket by its year, else by its key.
function bucketLabel(b) {
  const m = /^(-?\d{4,})-01-01T00:00:00Z$/.exec(String(b.from || ''));
  return m ? m[1] : b.key;
}

function itemButton(field, it, picked, onPick) {
  const b = document.createElement('button');
  b.type = 'button';
  b.className = 'facet-item';
  b.setAttribute('aria-pressed', String(picked));
  b.dataset.label = it.label;
  b.dataset.count = String(it.count);
  b.dataset.focusKey = field + '\u0000' + JSON.stringify(it.key);
  const v = document.createElement('span');
  v.className = 'facet-label';
  v.textContent = it.label;
  const n = document.createElement('span');
  n.className = 'facet-count';
  n.textContent = String(it.count);
  b.append(v, n);
  b.title = `${picked ? 'Remove' : 'Add'} ${field}: ${it.label} ${picked ? 'from' : 'to'} the filter (${it.count} documents)`;
  b.addEventListener('click', () => onPick(field, it.key));
  return b;
}

// restNote says what the list leaves out: values beyond its size, and
// documents without a value.
function restNote(f) {
  const parts = [];
  if (f.other_values) parts.push(`${f.other_values} more values (${f.other} documents)`);
  if (f.missing) parts.push(`${f.missing} without a value`);
  if (parts.length === 0) return null;
  const p = document.createElement('p');
  p.className = 'muted facet-rest';
  p.textContent = parts.join(' · ');
  return p;
}

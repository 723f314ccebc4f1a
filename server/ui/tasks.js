// The tasks panel: the server's ingest tasks (GET /v1/tasks) while any is
// enqueued or processing, each with a progress bar of the documents
// settled (indexed or refused) of those received, its rate and time left,
// and a button to cancel it when the page's key may (an admin key, or an
// open server). A task the page saw unfinished stays shown for a while
// once it ends, with its error if it has one.
//
// The page polls only while the panel shows an unfinished task and the
// page is visible, plus once at load, on a new key and when the page
// becomes visible again: a quiet page costs the server nothing.

// How often the page asks while a task is unfinished.
const POLL_MS = 2000;
// How long a task the page saw unfinished stays shown once it has ended.
const ENDED_MS = 15000;
// How many of the newest tasks the page asks for.
const LIMIT = 20;

const UNFINISHED = new Set(['enqueued', 'processing']);

const fmt = (n) => Math.round(n).toLocaleString('en');

// duration says seconds as "42 s", "3 min 05 s" or "2 h 07 min".
export function duration(secs) {
  const s = Math.max(0, Math.round(secs));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${String(s % 60).padStart(2, '0')} s`;
  return `${Math.floor(s / 3600)} h ${String(Math.floor(s / 60) % 60).padStart(2, '0')} min`;
}

// settled is how many of a task's documents are indexed or refused.
const settled = (t) => (t.indexed || 0) + (t.refused || 0);

// detail is the line under a task's bar.
export function detail(t) {
  const parts = [`${fmt(settled(t))} of ${fmt(t.received)} documents`];
  if (t.refused > 0) parts.push(`${fmt(t.refused)} refused`);
  if (t.state === 'enqueued') parts.push('waiting for the tasks before it');
  if (t.state === 'processing') {
    if (typeof t.docs_per_second === 'number') parts.push(`${t.docs_per_second.toFixed(1)} docs/s`);
    parts.push(typeof t.eta_seconds === 'number' ? `about ${duration(t.eta_seconds)} left` : 'starting');
  }
  return parts.join(' · ');
}

// TaskPanel draws the tasks into root (#tasks). api(method, path) is the
// page's API call; onEnd(task) is told of each task the page saw
// unfinished once it has ended (the collection's count has changed).
export class TaskPanel {
  constructor(root, api, onEnd) {
    this.root = root;
    this.list = root.querySelector('#task-list');
    this.status = root.querySelector('#tasks-status');
    this.problem = root.querySelector('#tasks-error');
    this.api = api;
    this.onEnd = onEnd;
    this.rows = new Map();   // id → the task's <li>
    this.seen = new Map();   // id → the last unfinished view of a task shown
    this.ended = new Map();  // id → {task, until}: ended tasks still shown
    this.timer = 0;
    this.busy = false;       // a request is under way
    this.again = false;      // ... and another was asked for meanwhile
    this.canCancel = null;   // the key's right to cancel, once probed
    this.keys = 0;           // keys set: a probe of an older one is dropped
    document.addEventListener('visibilitychange', () => {
      if (document.visibilityState === 'visible') this.refresh();
      else clearTimeout(this.timer);
    });
  }

  // keyChanged forgets what the old key could do, and asks again.
  keyChanged() {
    this.canCancel = null;
    this.keys++;
    this.refresh();
  }

  // refresh asks for the tasks now and, while any is unfinished, again
  // every POLL_MS.
  async refresh() {
    clearTimeout(this.timer);
    if (this.busy) {
      this.again = true;
      return;
    }
    this.busy = true;
    try {
      const tasks = (await this.api('GET', `v1/tasks?limit=${LIMIT}`)).tasks || [];
      // A task shown that is no longer among the newest: asked for alone.
      const listed = new Set(tasks.map((t) => t.id));
      for (const id of this.seen.keys()) {
        if (listed.has(id)) continue;
        try {
          tasks.push(await this.api('GET', `v1/tasks/${id}`));
        } catch (e) {
          if (e.status !== 404) throw e;
          this.seen.delete(id); // its record is pruned: nothing to show
        }
      }
      if (tasks.some((t) => UNFINISHED.has(t.state)) && this.canCancel === null) {
        const keys = this.keys;
        const can = await this.probe();
        if (keys === this.keys) this.canCancel = can;
      }
      this.show(tasks);
    } catch (e) {
      this.failed(e);
    }
    this.busy = false;
    if (this.again) {
      this.again = false;
      this.refresh();
      return;
    }
    this.schedule();
  }

  // probe learns whether the key may cancel a task: the API has no call
  // that names a key's role, so it asks to cancel task 0, which no key
  // can. An admin key (or none, on an open server) is refused for the id
  // (400), a read key for its role (403); nothing is cancelled either
  // way. null (unknown) when the server cannot be reached.
  async probe() {
    try {
      await this.api('DELETE', 'v1/tasks/0');
    } catch (e) {
      if (e.status === 400) return true;
      return e.status ? false : null;
    }
    return false;
  }

  // failed handles a failed poll: a server without tasks (501) or a key
  // that may not read them (401, 403) hides the panel, since the page
  // says elsewhere what is wrong with the key; while tasks are shown,
  // other failures (a server restarting) are said and polling goes on.
  failed(err) {
    if ([401, 403, 501].includes(err.status) || this.rows.size === 0) {
      this.seen.clear();
      this.ended.clear();
      this.draw([]);
      return;
    }
    this.say('poll', 'Could not refresh the tasks: ' + err.message);
  }

  // say shows a problem under the tasks, of a kind: 'poll' (the next
  // answer clears it) or 'cancel' (the next cancel does).
  say(kind, message) {
    this.problem.dataset.kind = kind;
    this.problem.textContent = message;
    this.problem.hidden = message === '';
  }

  // show draws the unfinished tasks of an answer, and those the page saw
  // unfinished that have since ended.
  show(tasks) {
    if (this.problem.dataset.kind === 'poll') this.say('poll', '');
    const byID = new Map(tasks.map((t) => [t.id, t]));
    for (const t of tasks) {
      if (UNFINISHED.has(t.state)) this.seen.set(t.id, t);
    }
    for (const id of [...this.seen.keys()]) {
      const t = byID.get(id);
      if (UNFINISHED.has(t.state)) continue;
      this.seen.delete(id);
      this.ended.set(id, {task: t, until: Date.now() + ENDED_MS});
      this.status.textContent = `Upload ${t.id} to ${t.collection} ${t.state}` +
        (t.state === 'succeeded' ? `: ${fmt(t.indexed)} documents indexed${t.refused ? `, ${fmt(t.refused)} refused` : ''}.` : t.error ? `: ${t.error}` : '.');
      this.onEnd(t);
    }
    this.prune();
  }

  // prune takes off the ended tasks whose time is up, and draws the rest.
  prune() {
    for (const [id, e] of this.ended) {
      if (e.until <= Date.now()) this.ended.delete(id);
    }
    const shown = [...this.seen.values(), ...[...this.ended.values()].map((e) => e.task)];
    this.draw(shown.sort((a, b) => a.id - b.id));
  }

  // schedule polls again while a task is unfinished and the page is
  // visible; else, while ended tasks are shown, it only takes them off
  // when their time is up.
  schedule() {
    clearTimeout(this.timer);
    if (document.visibilityState !== 'visible') return;
    if (this.seen.size > 0) {
      this.timer = setTimeout(() => this.refresh(), POLL_MS);
    } else if (this.ended.size > 0) {
      const next = Math.min(...[...this.ended.values()].map((e) => e.until));
      this.timer = setTimeout(() => {
        this.prune();
        this.schedule();
      }, Math.max(0, next - Date.now()) + 50);
    }
  }

  // draw shows tasks, in that order, updating the rows in place so that
  // focus stays on a cancel button a person is on.
  draw(tasks) {
    const ids = new Set(tasks.map((t) => t.id));
    for (const [id, li] of this.rows) {
      if (!ids.has(id)) {
        li.remove();
        this.rows.delete(id);
      }
    }
    tasks.forEach((t, i) => {
      let li = this.rows.get(t.id);
      if (!li) {
        li = this.row(t);
        this.rows.set(t.id, li);
      }
      if (this.list.children[i] !== li) this.list.insertBefore(li, this.list.children[i] || null);
      this.update(li, t);
    });
    this.root.hidden = tasks.length === 0;
    this.root.dataset.unfinished = String(tasks.filter((t) => UNFINISHED.has(t.state)).length);
  }

  row(t) {
    const li = document.createElement('li');
    li.className = 'task';
    li.dataset.id = String(t.id);
    li.dataset.collection = t.collection;
    const head = document.createElement('div');
    head.className = 'task-head';
    const name = document.createElement('span');
    name.className = 'task-name';
    name.id = `task-${t.id}-name`;
    name.textContent = `Upload ${t.id} to `;
    const coll = document.createElement('strong');
    coll.className = 'task-collection';
    coll.textContent = t.collection;
    name.append(coll);
    const st = document.createElement('span');
    st.className = 'task-state';
    const cancel = document.createElement('button');
    cancel.type = 'button';
    cancel.className = 'task-cancel';
    cancel.textContent = 'Cancel';
    cancel.setAttribute('aria-label', `Cancel upload ${t.id} to ${t.collection}`);
    cancel.addEventListener('click', () => this.cancel(t.id, cancel));
    head.append(name, st, cancel);
    const bar = document.createElement('progress');
    bar.className = 'task-bar';
    bar.setAttribute('aria-labelledby', name.id);
    bar.setAttribute('aria-describedby', `task-${t.id}-detail`);
    const info = document.createElement('p');
    info.className = 'task-detail muted';
    info.id = `task-${t.id}-detail`;
    const error = document.createElement('p');
    error.className = 'task-error';
    li.append(head, bar, info, error);
    return li;
  }

  update(li, t) {
    li.dataset.state = t.state;
    li.querySelector('.task-state').textContent = t.state;
    const bar = li.querySelector('.task-bar');
    bar.max = Math.max(1, t.received);
    bar.value = Math.min(settled(t), bar.max);
    li.querySelector('.task-detail').textContent = detail(t);
    const error = li.querySelector('.task-error');
    error.textContent = t.error || '';
    error.hidden = !t.error;
    const cancel = li.querySelector('.task-cancel');
    cancel.hidden = !(this.canCancel && UNFINISHED.has(t.state));
  }

  // cancel asks the server to cancel a task (DELETE /v1/tasks/{id}): an
  // enqueued one ends at once, a running one once its batch in progress
  // is committed, which the answer waits for.
  async cancel(id, button) {
    button.disabled = true;
    button.textContent = 'Cancelling…';
    this.say('cancel', '');
    try {
      await this.api('DELETE', `v1/tasks/${id}`);
    } catch (e) {
      if (e.code !== 'task_finished') this.say('cancel', `Could not cancel upload ${id}: ${e.message}`);
    }
    button.disabled = false;
    button.textContent = 'Cancel';
    this.refresh();
  }
}

"""The report page's inline assets: its style sheet and the script of the per-question browser
(search, filters, cards built on first open, each run's badges by its own measure)."""

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1600px;padding:16px 24px;
color:#1d2330;background:#fff}
h1{font-size:22px;margin:4px 0 2px}
h2{font-size:17px;margin:26px 0 8px;border-bottom:1px solid #e3e6ec;padding-bottom:4px}
.sub{color:#5b6475;font-size:12.5px}
.note{background:#fff7e0;border-left:3px solid #e0a800;padding:6px 10px;margin:8px 0;
font-size:12.5px}
table{border-collapse:collapse;font-size:12.5px}th,td{border:1px solid #e3e6ec;padding:4px 7px;vertical-align:top}
th{background:#f4f6f9;text-align:left}td.num{text-align:right;font-variant-numeric:tabular-nums}
td.best{font-weight:700;background:#eef7ee}.settings{font-family:ui-monospace,monospace;
font-size:11.5px;white-space:pre-wrap}
.stages{font-family:ui-monospace,monospace;font-size:11.5px}
#summary td,#cost td{overflow-wrap:anywhere}#summary td.num,#cost td.num{overflow-wrap:normal;white-space:nowrap}
#summary .path{font-size:11.5px}#summary td.settings{min-width:26ch}h3{font-size:15px;margin:18px 0 6px}
.plot svg{max-width:100%;height:auto}.wide{overflow-x:auto}.plots{display:flex;flex-wrap:wrap;gap:12px}
#controls{display:flex;flex-wrap:wrap;gap:8px;align-items:center;margin:8px 0;position:sticky;top:0;background:#fff;
padding:6px 0;z-index:2;border-bottom:1px solid #e3e6ec}
#controls input[type=search]{width:320px;padding:4px 6px}#controls select{padding:3px}
.q{border:1px solid #e3e6ec;border-radius:6px;margin:6px 0}.q>summary{cursor:pointer;padding:6px 10px;list-style:none}
.q>summary::-webkit-details-marker{display:none}.q[open]>summary{background:#f4f6f9}
.qid{color:#5b6475;font-size:11.5px;margin-right:6px}.tag{display:inline-block;font-size:11px;padding:0 6px;
border-radius:8px;background:#e8ecf3;margin-left:4px}
.badge{display:inline-block;font-size:11px;padding:0 6px;border-radius:8px;margin-left:4px}
.ok{background:#d8f0d8;color:#1c5e1c}.bad{background:#f6dada;color:#8a1f1f}.miss{background:#fff0c2;color:#6b5200}
.part{background:#fde6c8;color:#7a4300}.plain{background:#e8ecf3;color:#1d2330}
.body{padding:6px 12px 10px}.cols{display:grid;grid-template-columns:repeat(auto-fit,minmax(300px,1fr));gap:12px}
.col{border-left:3px solid #cfd6e2;padding-left:8px}.col h4{margin:4px 0}
ol.ranked{margin:2px 0 6px 18px;padding:0}ol.ranked li.gold{color:#1c5e1c;font-weight:600}
ol.ranked li.gold::after{content:" \\2605 gold"}
.hop{margin:4px 0 6px}.fact{font-size:12.5px;margin:1px 0 1px 12px}.fact .s{font-family:ui-monospace,monospace;
color:#5b6475;font-size:11.5px}.gp{font-size:12.5px;margin:2px 0}.gp b{color:#1c5e1c}
button{padding:4px 10px}
"""

SCRIPT = r"""
(function(){
const D = JSON.parse(document.getElementById('report-data').textContent);
const R = D.runs, Q = D.questions;
const $ = id => document.getElementById(id);
const ENT = {'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;'};
const esc = s => String(s == null ? '' : s).replace(/[&<>"]/g, c => ENT[c]);
// metrics: null (undefined, e.g. recall without gold) and non-finite ("n/a" in the data) print n/a
const fmt = v => Number.isFinite(v) ? v.toFixed(3) : 'n/a';
const solved = (q, j, m) => { const r = q.runs[j]; return m === 'em' ? r.em === 1 : r.recall5 === 1; };
// a run's badge by its own measure (R[j].measure): EM for LLM answers, R@5 for a no-LLM run, whose
// answer is a by-product of the retrieval; partial recall is amber, no gold (null recall) plain
const grade = (r, j) => R[j].measure === 'em' ? (r.em === 1 ? 'ok' : 'bad')
  : r.recall5 === 1 ? 'ok' : r.recall5 > 0 ? 'part' : Number.isFinite(r.recall5) ? 'bad' : 'plain';
// the runs whose index lacks some of the question's gold passages (runs may use different indexes)
const lacking = q => q.runs.map((r, j) => r.gold_missing > 0 ? R[j].name : null).filter(n => n !== null);
let PAGE = 50, shown = PAGE, matches = [];
for (const q of Q) q.hay = [q.id, q.question, q.gold.join(' '), ...q.runs.map(r => r.answer),
  ...q.passages.map(p => p[0])].join(' ').toLowerCase();
function fill(sel, opts){ for (const [v, t] of opts){ const o = document.createElement('option'); o.value = v;
  o.textContent = t; sel.appendChild(o);} }
const facets = [...new Set(Q.flatMap(q => Object.keys(q.facets)))];
const typeSel = $('f-type');
fill(typeSel, [['', 'all types']]);
for (const f of facets) fill(typeSel, [...new Set(Q.map(q => q.facets[f]).filter(v => v != null))].sort()
  .map(v => [f + '=' + v, f + ': ' + v]));
fill($('f-a'), [['', 'any run'], ...R.map((r, j) => [String(j), r.name])]);
fill($('f-b'), [['', 'any run'], ...R.map((r, j) => [String(j), r.name])]);
function card(q){
  const d = document.createElement('details'); d.className = 'q'; d.dataset.id = q.id;
  const badges = q.runs.map((r, j) => `<span class="badge ${grade(r, j)}" data-measure="${R[j].measure}" `
    + `title="${esc(R[j].name)}: EM ${fmt(r.em)}, F1 ${fmt(r.f1)}, R@5 ${fmt(r.recall5)}">${esc(R[j].name)} `
    + (R[j].measure === 'em' ? `EM ${r.em === 1 ? '✓' : '✗'} R@5 ${fmt(r.recall5)}` : `R@5 ${fmt(r.recall5)}`)
    + '</span>').join('');
  const tags = Object.entries(q.facets).map(([k, v]) => `<span class="tag">${esc(v)}</span>`).join('');
  const names = lacking(q);
  const miss = q.gold_not_in_index ? `<span class="badge miss" title="gold passages not in the index of `
    + `${esc(names.length === R.length ? 'every run' : names.join(', '))}: no method can retrieve them">`
    + 'gold not in index</span>' : '';
  d.innerHTML = `<summary><span class="qid">${esc(q.id)}</span>${esc(q.question)}${tags}${miss}<br>${badges}</summary>`;
  d.addEventListener('toggle', () => {  // the body is built on first open: the DOM stays small
    if (d.open && !d.querySelector('.body')) d.insertAdjacentHTML('beforeend', body(q)); });
  return d;
}
function body(q){
  let h = `<div class="body"><div><b>gold answer:</b> ${esc(q.gold.join(' | '))}</div>`;
  if (q.passages.length){ h += '<div><b>gold passages:</b>' + q.passages.map(p =>
    `<div class="gp"><b>${esc(p[0])}</b>: ${esc(p[1])}</div>`).join('') + '</div>'; }
  h += '<div class="cols">';
  q.runs.forEach((r, j) => {
    const em = R[j].measure === 'em';
    h += `<div class="col"><h4>${esc(R[j].name)}</h4><div><b>answer${em ? '' : ' (no LLM: the evidence\'s '
      + 'bridge entity)'}:</b> ${esc(r.answer)} <span class="badge ${em ? grade(r, j) : 'plain'}">EM ${fmt(r.em)}`
      + `</span> F1 ${fmt(r.f1)}</div>`
      + r.notes.map(n => `<div class="sub">note: ${esc(n)}</div>`).join('')
      + (r.gold_missing > 0 ? `<div class="sub gm">${r.gold_missing} gold passage(s) not in this run's index: `
        + 'never retrieved</div>' : '')
      + `<div><b>ranked passages</b> ${em ? `(R@5 ${fmt(r.recall5)})` : `<span class="badge ${grade(r, j)}">`
        + `R@5 ${fmt(r.recall5)}</span>`}:</div><ol class="ranked">`
      + r.ranked.map(p => `<li class="${p[1] ? 'gold' : ''}">${esc(p[0])}</li>`).join('') + '</ol>';
    if (r.chain.length){ h += '<div><b>evidence chain</b></div>';
      r.chain.forEach((c, t) => {
        h += `<div class="hop">hop ${t + 1}: <i>${esc(c.subquery)}</i> → <b>${esc(c.answer)}</b>`
        + c.facts.map(f => `<div class="fact"><span class="s" title="fact score; BFS distance to the carried frontier">`
          + `${f.score == null ? '' : fmt(f.score)} `
          + `d=${f.distance == null || f.distance < 0 ? '–' : Number.isFinite(f.distance) ? f.distance : 'n/a'}`
          + `</span> [${esc(f.title)}] ${esc(f.text)}</div>`).join('')
        + (c.linked.length ? `<div class="fact">linked: ${c.linked.map(esc).join(', ')}</div>` : '') + '</div>'; }); }
    h += '</div>'; });
  return h + '</div></div>';
}
function apply(){
  const text = $('f-search').value.trim().toLowerCase().split(/\s+/).filter(Boolean);
  const type = typeSel.value, a = $('f-a').value, b = $('f-b').value, m = $('f-metric').value;
  const g = $('f-gold').value;
  const [fk, fv] = type ? [type.slice(0, type.indexOf('=')), type.slice(type.indexOf('=') + 1)] : [null, null];
  matches = Q.filter(q => text.every(w => q.hay.includes(w)) && (!fk || q.facets[fk] === fv)
    && (a === '' || solved(q, +a, m)) && (b === '' || !solved(q, +b, m))
    && (g === '' || (g === 'missing') === q.gold_not_in_index));
  shown = PAGE; render();
}
function render(){
  const list = $('questions'); list.textContent = '';
  for (const q of matches.slice(0, shown)) list.appendChild(card(q));
  $('count').textContent = `${matches.length} of ${Q.length} questions`;
  $('more').style.display = matches.length > shown ? '' : 'none';
}
$('more').addEventListener('click', () => { shown += PAGE; render(); });
for (const id of ['f-search', 'f-type', 'f-gold', 'f-a', 'f-b', 'f-metric']) $(id).addEventListener('input', apply);
apply();
})();
"""


__all__ = ["CSS", "SCRIPT"]

//! The page's skeleton: HTML escaping, the packed data, the style and the script that
//! renders the page in the browser.
use serde_json::Value;

pub(super) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The page: the data as gzip-compressed JSON in base64 (the browser's own
/// `DecompressionStream` inflates it) and the script that renders it.
/// `value` as the page carries it: JSON, gzip, base64.
pub(super) fn pack(value: &Value) -> String {
    use base64::Engine as _;
    use std::io::Write as _;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
    gz.write_all(value.to_string().as_bytes())
        .expect("writing to memory");
    base64::engine::general_purpose::STANDARD.encode(gz.finish().expect("in memory"))
}

/// The page: the packed data and image table, the style and the renderer.
pub(super) fn page(data: &str, images: &str, names: &[String]) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>Sift report: {}</title><style>{CSS}</style></head><body>\
         <h1>Sift report</h1><p class=\"sub\">{}</p><nav id=\"tasks\"></nav><main id=\"main\"></main>\
         <script id=\"data\" type=\"application/gzip-base64\">{data}</script>\
         <script id=\"images\" type=\"application/gzip-base64\">{images}</script><script>{JS}</script></body></html>\n",
        esc(&names.join(", ")),
        esc(&names.join(", "))
    )
}

const CSS: &str = r##"
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
h1{margin:0}.sub{color:#666}nav button{margin-right:.4em}nav button.on{font-weight:bold}
section{margin:1.2em 0}table{border-collapse:collapse;font-size:13px}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}th{background:#f4f4f4}
td.l,th.l{text-align:left}.query{border:1px solid #ddd;margin:.5em 0;padding:.5em}
.hits{display:flex;flex-wrap:wrap;gap:1em}.hits ol{width:320px;font-size:12px;margin:0;padding-left:1.4em}
.gold{background:#dff3df}.excluded{text-decoration:line-through;color:#999}
img.thumb{max-width:96px;max-height:96px;margin:2px;vertical-align:middle}
.qlist{max-height:300px;overflow:auto;border:1px solid #ddd;font-size:13px}
.qlist div{cursor:pointer;padding:1px 4px}.qlist div.on{background:#e8eefc}
"##;

const JS: &str = r##"
let D;
async function unpack(id){const t=atob(document.getElementById(id).textContent.trim());const b=new Uint8Array(t.length);for(let i=0;i<t.length;i++)b[i]=t.charCodeAt(i);
 const s=new Blob([b]).stream().pipeThrough(new DecompressionStream('gzip'));return JSON.parse(await new Response(s).text())}
async function load(){const[d,images]=await Promise.all([unpack('data'),unpack('images')]);d.images=images;return d}
const $=(t,a={},...k)=>{const e=document.createElement(t);for(const[n,v]of Object.entries(a))n==='html'?e.innerHTML=v:e.setAttribute(n,v);k.forEach(c=>e.append(c));return e};
const f4=v=>v==null||Number.isNaN(v)?'-':(v<1e-4&&v>0?v.toExponential(1):v.toFixed(4));
let cur=0;
function nav(){const n=document.getElementById('tasks');n.innerHTML='';D.tasks.forEach((t,i)=>{const b=$('button',{class:i===cur?'on':''},'Task '+t.task);b.onclick=()=>{cur=i;nav();show()};n.append(b)})}
function show(){const t=D.tasks[cur],m=document.getElementById('main');m.innerHTML='';
 m.append($('section',{id:'overview'},$('h2',{},'Task '+t.task+': '+D.metric+' by domain'),$('div',{html:t.heatmap}),$('h3',{},'Mean over queries, 95% bootstrap CI ('+D.resamples+' resamples)'),$('div',{html:t.barsSvg}),$('h3',{},'Per domain'),$('div',{html:t.grouped})));
 const sa=$('select',{id:'a'}),sb=$('select',{id:'b'});t.labels.forEach((l,i)=>{sa.append($('option',{value:i},l));sb.append($('option',{value:i},l))});if(t.labels.length>1)sb.value=1;
 const cmp=$('div',{id:'comparison'});
 m.append($('section',{},$('h2',{},'Paired comparison'),$('label',{},'A ',sa),' ',$('label',{},'B ',sb),cmp));
 const dom=$('select',{id:'domain'},$('option',{value:''},'every domain'));t.domains.forEach(d=>dom.append($('option',{value:d},d)));
 const ret=$('select',{id:'retriever'},$('option',{value:''},'every retriever'));t.labels.forEach((l,i)=>ret.append($('option',{value:i},l)));
 const beats=$('input',{type:'checkbox',id:'beats'}),search=$('input',{type:'search',id:'search',placeholder:'query text or id'});
 const list=$('div',{class:'qlist',id:'qlist'}),detail=$('div',{id:'detail'});
 m.append($('section',{id:'drill'},$('h2',{},'Queries'),$('label',{},'domain ',dom),' ',$('label',{},'retriever ',ret),' ',$('label',{},beats,' B beats A'),' ',search,list,detail));
 const render=()=>{renderCmp(t,+sa.value,+sb.value,cmp);renderList(t,+sa.value,+sb.value,dom.value,ret.value,beats.checked,search.value.toLowerCase(),list,detail)};
 [sa,sb,dom,ret,beats].forEach(e=>e.onchange=render);search.oninput=render;render()}
function pair(t,a,b){const c=t.comparisons.find(c=>c.a===Math.min(a,b)&&c.b===Math.max(a,b));if(a<b)return c;
 return{a,b,domains:c.domains.map(d=>({...d,mean_a:d.mean_b,mean_b:d.mean_a,wins:d.losses,losses:d.wins,t:-d.t}))}}
function renderCmp(t,a,b,el){el.innerHTML='';if(a===b){el.append($('p',{},'Choose two retrievers.'));return}
 const c=pair(t,a,b);const tb=$('table',{class:'cmp'});
 tb.append($('tr',{},...['domain','queries','A','B','A − B','wins/ties/losses','t-test p','Holm','randomisation p','Holm'].map(h=>$('th',{},h))));
 c.domains.forEach(d=>tb.append($('tr',{},$('td',{class:'l'},d.domain),$('td',{},d.n),$('td',{},f4(d.mean_a)),$('td',{},f4(d.mean_b)),$('td',{},(d.mean_a-d.mean_b).toFixed(4)),$('td',{},d.wins+'/'+d.ties+'/'+d.losses),$('td',{},f4(d.t_p)),$('td',{},f4(d.t_p_holm)),$('td',{},f4(d.perm_p)+(d.perm_exact?' (exact)':'')),$('td',{},f4(d.perm_p_holm)))));
 el.append(tb,$('p',{class:'sub'},'Holm: p-values adjusted across the domains (family-wise error of testing each domain); "all" pools every query.'));
 const diffs=t.queries.map(q=>(q.results[a].value??0)-(q.results[b].value??0)).sort((x,y)=>x-y);
 const W=600,H=120,n=diffs.length;let s='<svg xmlns="http://www.w3.org/2000/svg" class="diffs" width="'+W+'" height="'+H+'"><line x1="0" x2="'+W+'" y1="'+H/2+'" y2="'+H/2+'" stroke="#888"/>';
 diffs.forEach((d,i)=>{const x=i*W/Math.max(n,1),h=Math.abs(d)*H/2;s+='<rect x="'+x+'" width="'+Math.max(W/Math.max(n,1)-1,1)+'" y="'+(d>0?H/2-h:H/2)+'" height="'+h+'" fill="'+(d>0?'#2a7':'#c44')+'"/>'});
 el.append($('p',{},'Per-query differences A − B, sorted'),$('div',{html:s+'</svg>'}))}
function renderList(t,a,b,dom,ret,beats,txt,list,detail){list.innerHTML='';let shown=0;
 t.queries.forEach((q,i)=>{if(dom&&q.domain!==dom)return;if(beats&&!((q.results[b].value??0)>(q.results[a].value??0)))return;
  if(txt&&!(q.id.toLowerCase().includes(txt)||(q.text||'').toLowerCase().includes(txt)))return;
  const v=ret===''?q.results.map(r=>f4(r.value)).join(' / '):f4(q.results[+ret].value);
  const row=$('div',{class:'q','data-i':i},q.domain+' · '+q.id+' · '+v+' · '+(q.text||'').slice(0,90));row.onclick=()=>{list.querySelectorAll('.on').forEach(e=>e.classList.remove('on'));row.classList.add('on');renderQuery(t,q,ret,detail)};list.append(row);shown++});
 list.dataset.count=shown;if(!shown)list.append($('p',{},'No query matches.'))}
function renderQuery(t,q,ret,el){el.innerHTML='';const box=$('div',{class:'query'},$('h3',{},q.domain+' / '+q.id),$('p',{},q.text||'(no corpus given: query text unknown)'));
 q.images.forEach(ix=>{const[id,src]=D.images[ix];box.append(src?$('img',{class:'thumb qimg',src,title:id,alt:id}):$('span',{class:'noimg'},'['+id+'] '))});
 const hits=$('div',{class:'hits'});t.labels.forEach((l,ri)=>{if(ret!==''&&+ret!==ri)return;const r=q.results[ri];const ol=$('ol',{});
  r.hits.forEach(([di,score,grade,ex])=>{const[id,text,ix]=t.docs[di];const[image,src]=ix==null?[]:D.images[ix];const li=$('li',{class:(grade>0?'gold ':'')+(ex?'excluded':'')},(grade>0?'✓'+grade+' ':'')+id+' ('+score.toFixed(3)+')');
   if(src)li.append($('br'),$('img',{class:'thumb cand',src,alt:image||''}));if(text)li.append($('div',{},text));ol.append(li)});
  hits.append($('div',{},$('h4',{},l+' — '+D.metric+' '+f4(r.value)),ol))});box.append(hits);el.append(box)}
// #task=<n>&query=<domain>/<id>&a=<i>&b=<j>: a view to open (links, screenshots)
function fromHash(){const h=new URLSearchParams(location.hash.slice(1));const ti=D.tasks.findIndex(t=>t.task===h.get('task'));if(ti>=0)cur=ti;nav();show();
 const t=D.tasks[cur];for(const k of['a','b'])if(h.get(k)!==null){const e=document.getElementById(k);e.value=h.get(k);e.dispatchEvent(new Event('change'))}
 const q=h.get('query');if(q){const i=t.queries.findIndex(x=>x.domain+'/'+x.id===q);const row=document.querySelector('#qlist [data-i="'+i+'"]');if(row){row.click();row.scrollIntoView()}}}
load().then(d=>{D=d;fromHash();window.onhashchange=fromHash;document.body.dataset.ready='1';document.body.dataset.readyMs=Math.round(performance.now())}).catch(e=>{document.body.dataset.error=String(e);throw e});
"##;

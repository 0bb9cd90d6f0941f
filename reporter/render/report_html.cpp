#include "render/report_html.h"

#include <fmt/format.h>

#include <algorithm>

#include "analyses/diagnosis.h"
#include "analyses/oom_report.h"
#include "analyses/processes.h"
#include "analyses/summary.h"

namespace vramtrace {

namespace {

using i64 = std::int64_t;
using u64 = std::uint64_t;

double ms(i64 ns) { return static_cast<double>(ns) / 1e6; }

nlohmann::json layout_json(const Snapshot& s, const ReportOptions& o) {
  // Keep the largest segments, drawn in address order.
  std::vector<const SegmentSnapshot*> segs;
  segs.reserve(s.segments.size());
  for (const auto& g : s.segments) segs.push_back(&g);
  if (segs.size() > o.max_segments_drawn) {
    std::partial_sort(segs.begin(), segs.begin() + static_cast<std::ptrdiff_t>(o.max_segments_drawn), segs.end(),
                      [](auto* a, auto* b) { return a->total_size > b->total_size; });
    segs.resize(o.max_segments_drawn);
    std::sort(segs.begin(), segs.end(), [](auto* a, auto* b) { return a->address < b->address; });
  }
  nlohmann::json arr = nlohmann::json::array();
  for (const auto* g : segs) {
    nlohmann::json blocks = nlohmann::json::array();
    std::size_t n = 0;
    for (const auto& b : g->blocks) {
      int state = b.state == BlockState::active_allocated ? 0 : b.state == BlockState::active_pending_free ? 1 : 2;
      if (n + 1 >= o.max_blocks_per_segment && n + 1 < g->blocks.size()) {
        // merge the rest into one run, marked state 3 ("many blocks")
        u64 rest = g->address + g->total_size - b.address;
        blocks.push_back({b.address - g->address, rest, 3, 0});
        break;
      }
      blocks.push_back({b.address - g->address, b.size, state, b.requested_size});
      ++n;
    }
    arr.push_back({{"addr", fmt::format("0x{:x}", g->address)},
                   {"size", g->total_size},
                   {"large", g->is_large},
                   {"expandable", g->is_expandable},
                   {"blocks", blocks}});
  }
  return arr;
}

nlohmann::json biggest_json(const std::vector<LiveAllocation>& v, i64 t0) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& l : v)
    a.push_back({{"addr", fmt::format("0x{:x}", l.address)},
                 {"size", l.size},
                 {"requested", l.requested_size},
                 {"stream", l.stream},
                 {"t", ms(l.alloc_time_ns - t0)},
                 {"pending", l.pending_free}});
  return a;
}

nlohmann::json state_json(const StateAt& st, i64 t0, const ReportOptions& o) {
  const auto& s = st.stats;
  return {{"t", ms(st.time_ns - t0)},
          {"event", st.event_index},
          {"allocated", s.allocated_bytes[kStatAll].current},
          {"reserved", s.reserved_bytes[kStatAll].current},
          {"active", s.active_bytes[kStatAll].current},
          {"requested", s.requested_bytes[kStatAll].current},
          {"inactive_split", s.inactive_split_bytes[kStatAll].current},
          {"largest_free", st.largest_free_block},
          {"segments_total", st.layout.segments.size()},
          {"segments", layout_json(st.layout, o)},
          {"biggest", biggest_json(st.biggest, t0)}};
}

// The page. Placeholders: @DATA@ (escaped JSON).
constexpr const char* kPage = R"PAGE(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<title>vramtrace report</title>
<style>
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;padding:16px 24px;color:#1d2330;background:#fff}
h1{font-size:20px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 6px;border-bottom:1px solid #d8dde6;padding-bottom:3px}
h3{font-size:15px;margin:18px 0 4px}.sub{color:#5b6475}.legend span{display:inline-block;margin-right:14px}
.sw{display:inline-block;width:12px;height:12px;vertical-align:-1px;margin-right:4px;border-radius:2px}
.plot{position:relative;user-select:none}canvas{display:block}
.tip{position:absolute;pointer-events:none;background:rgba(255,255,255,.96);border:1px solid #9aa3b5;border-radius:4px;padding:5px 8px;font-size:12px;white-space:pre;display:none;box-shadow:0 1px 4px rgba(0,0,0,.15);z-index:3}
table{border-collapse:collapse;font-size:13px;margin:4px 0}td,th{padding:2px 10px;border-bottom:1px solid #e6e9ef;text-align:right}
th{background:#f3f5f9}td.l,th.l{text-align:left}pre{font:12px/1.25 ui-monospace,Menlo,Consolas,monospace;background:#f7f8fb;padding:8px;overflow:auto}
button{font:inherit;font-size:12px;margin-left:8px}.diag{font-weight:600}.note{color:#7a4b00}
</style></head><body>
<h1 id="title">vramtrace report</h1><div class="sub" id="subtitle"></div>
<div class="legend" id="legend"></div>
<div id="main"></div>
<pre id="vt-probe" hidden></pre>
<script type="application/json" id="vt-data">@DATA@</script>
<script>
'use strict';
(function(){
var errors=[];
window.addEventListener('error',function(e){errors.push(String(e.message));});
var DATA=JSON.parse(document.getElementById('vt-data').textContent);
var COLORS={reserved:'#e8912d',active:'#3aa35b',allocated:'#2f6fd6',requested:'#8f5bd6',cap:'#d62f2f'};
var SERIES=[['reserved','r'],['active','c'],['allocated','a']];
function el(tag,attrs,text){var e=document.createElement(tag);if(attrs)for(var k in attrs)e.setAttribute(k,attrs[k]);if(text!==undefined)e.textContent=String(text);return e;}
function fmtB(b){if(b===null||b===undefined)return 'n/a';var n=Math.abs(b),s=b<0?'-':'';
 if(n<=1024)return s+n+' bytes';if(n<=1048576)return s+(n/1024).toFixed(2)+' KiB';if(n<=1073741824)return s+(n/1048576).toFixed(2)+' MiB';return s+(n/1073741824).toFixed(2)+' GiB';}
function fmtT(ms){var a=Math.abs(ms);if(ms===0)return '0';if(a>=1000)return (ms/1000).toFixed(3)+' s';if(a>=1)return ms.toFixed(3)+' ms';return (ms*1000).toFixed(1)+' us';}
function niceStep(range,n){var raw=range/Math.max(1,n),p=Math.pow(10,Math.floor(Math.log10(raw))),f=raw/p;return (f<1.5?1:f<3?2:f<7?5:10)*p;}
function niceBytesStep(range,n){var u=range>3*1073741824?1073741824:range>3*1048576?1048576:1024;var s=niceStep(range/u,n);return s*u;}
// Values at time t (ms from the device's first event): the bucket holding t.
function bucketAt(tl,t){var lo=0,hi=tl.t.length-1;if(hi<0)return -1;if(t<tl.t[0])return 0;
 while(lo<hi){var mid=(lo+hi+1)>>1;if(tl.t[mid]<=t)lo=mid;else hi=mid-1;}return lo;}
function valuesAt(dev,t){var tl=dev.tl,i=bucketAt(tl,t);if(i<0)return null;var o={bucket:i,t_begin:tl.t[i],t_end:tl.te[i]};
 SERIES.concat([['requested','q']]).forEach(function(s){o[s[0]]={min:tl[s[1]+'min'][i],max:tl[s[1]+'max'][i],last:tl[s[1]+'last'][i]};});return o;}
function legend(){var L=document.getElementById('legend');[['allocated','allocated'],['active','active (allocated + pending free)'],['reserved','reserved (segments)'],['cap','capacity']].forEach(function(p){
 var s=el('span');s.appendChild(el('i',{'class':'sw',style:'background:'+COLORS[p[0]]}));s.appendChild(document.createTextNode(p[1]));L.appendChild(s);});
 L.appendChild(el('span',null,'\u25BC OOM'));L.appendChild(el('span',null,'\u2758 mark'));L.appendChild(el('span',{'class':'sub'},'drag to zoom, double-click to reset'));}

function Timeline(dev,host){
 var self=this;this.dev=dev;var W=Math.max(600,Math.min(1400,(host.clientWidth||1300)-10)),H=320,ml=78,mr=12,mt=10,mb=28;
 var wrap=el('div',{'class':'plot'});var cv=el('canvas',{width:W,height:H});var tip=el('div',{'class':'tip'});
 var bar=el('div');var reset=el('button',null,'reset zoom');bar.appendChild(reset);
 wrap.appendChild(cv);wrap.appendChild(tip);host.appendChild(wrap);host.appendChild(bar);this.canvas=cv;
 var tl=dev.tl,n=tl.t.length,tmax=n?tl.te[n-1]:1;if(tmax<=0)tmax=1;var view=[0,tmax];
 var ymax=0;for(var i=0;i<n;i++){ymax=Math.max(ymax,tl.rmax[i],tl.cmax[i],tl.amax[i]);}
 var capIn=dev.capacity&&dev.capacity<=2.5*ymax;if(capIn)ymax=Math.max(ymax,dev.capacity);if(ymax<=0)ymax=1;ymax*=1.08;
 var ctx=cv.getContext('2d');
 function X(t){return ml+(t-view[0])/(view[1]-view[0])*(W-ml-mr);}
 function T(x){return view[0]+(x-ml)/(W-ml-mr)*(view[1]-view[0]);}
 function Y(v){return mt+(1-v/ymax)*(H-mt-mb);}
 function draw(sel){ctx.clearRect(0,0,W,H);ctx.fillStyle='#fff';ctx.fillRect(0,0,W,H);
  ctx.font='11px sans-serif';ctx.fillStyle='#5b6475';ctx.strokeStyle='#e6e9ef';ctx.lineWidth=1;
  var ys=niceBytesStep(ymax,6);for(var v=0;v<=ymax;v+=ys){var y=Math.round(Y(v))+.5;ctx.beginPath();ctx.moveTo(ml,y);ctx.lineTo(W-mr,y);ctx.stroke();ctx.textAlign='right';ctx.fillText(fmtB(v),ml-6,y+4);}
  var xs=niceStep(view[1]-view[0],8);for(var t=Math.ceil(view[0]/xs)*xs;t<=view[1];t+=xs){var x=Math.round(X(t))+.5;ctx.beginPath();ctx.moveTo(x,mt);ctx.lineTo(x,H-mb);ctx.stroke();ctx.textAlign='center';ctx.fillText(fmtT(t),x,H-mb+14);}
  // per-pixel min/max of every series over the buckets in view
  var cols=W-ml-mr,pmin={},pmax={};SERIES.forEach(function(s){pmin[s[0]]=new Float64Array(cols).fill(NaN);pmax[s[0]]=new Float64Array(cols).fill(NaN);});
  for(var i=0;i<n;i++){if(tl.te[i]<view[0]||tl.t[i]>view[1])continue;var x0=Math.floor(X(tl.t[i]))-ml,x1=Math.floor(X(tl.te[i]))-ml;
   x0=Math.max(0,x0);x1=Math.min(cols-1,Math.max(x0,x1));
   for(var x=x0;x<=x1;x++)SERIES.forEach(function(s){var k=s[0],mn=tl[s[1]+'min'][i],mx=tl[s[1]+'max'][i];
    if(!(pmin[k][x]<=mn))pmin[k][x]=mn;if(!(pmax[k][x]>=mx))pmax[k][x]=mx;});}
  SERIES.forEach(function(s){var k=s[0];ctx.fillStyle=COLORS[k];ctx.globalAlpha=k==='reserved'?0.35:0.55;
   for(var x=0;x<cols;x++){if(isNaN(pmax[k][x]))continue;var y0=Y(pmax[k][x]),y1=Y(pmin[k][x]);ctx.fillRect(ml+x,y0,1,Math.max(1,y1-y0));}
   ctx.globalAlpha=1;ctx.strokeStyle=COLORS[k];ctx.lineWidth=1.4;ctx.beginPath();var started=false;
   for(var x=0;x<cols;x++){if(isNaN(pmax[k][x]))continue;var y=Y(pmax[k][x]);if(!started){ctx.moveTo(ml+x,y);started=true;}else ctx.lineTo(ml+x,y);}ctx.stroke();});
  if(dev.capacity&&!capIn){ctx.fillStyle=COLORS.cap;ctx.textAlign='right';ctx.fillText('capacity '+fmtB(dev.capacity)+' (above the scale)',W-mr-4,mt+12);}
  if(capIn){ctx.strokeStyle=COLORS.cap;ctx.setLineDash([6,4]);ctx.lineWidth=1.5;var yc=Y(dev.capacity);ctx.beginPath();ctx.moveTo(ml,yc);ctx.lineTo(W-mr,yc);ctx.stroke();ctx.setLineDash([]);
   ctx.fillStyle=COLORS.cap;ctx.textAlign='left';ctx.fillText('capacity '+fmtB(dev.capacity),ml+4,yc-4);}
  dev.markers.forEach(function(m){if(m.t<view[0]||m.t>view[1])return;var x=X(m.t);
   if(m.kind==='oom'){ctx.fillStyle=COLORS.cap;ctx.beginPath();ctx.moveTo(x-6,mt);ctx.lineTo(x+6,mt);ctx.lineTo(x,mt+10);ctx.fill();}
   else{ctx.strokeStyle='#7d8596';ctx.beginPath();ctx.moveTo(x,H-mb-8);ctx.lineTo(x,H-mb);ctx.stroke();}});
  ctx.strokeStyle='#9aa3b5';ctx.strokeRect(ml+.5,mt+.5,W-ml-mr,H-mt-mb);
  if(sel){ctx.fillStyle='rgba(47,111,214,.12)';ctx.fillRect(Math.min(sel[0],sel[1]),mt,Math.abs(sel[1]-sel[0]),H-mt-mb);}
 }
 this.draw=draw;var drag=null;
 cv.addEventListener('mousedown',function(e){drag=[e.offsetX,e.offsetX];});
 cv.addEventListener('mousemove',function(e){var x=e.offsetX;if(drag){drag[1]=x;draw(drag);}
  if(x<ml||x>W-mr){tip.style.display='none';return;}var t=T(x),v=valuesAt(dev,t);if(!v){tip.style.display='none';return;}
  var lines=['t = '+fmtT(t)];SERIES.concat([['requested','q']]).slice().reverse().forEach(function(s){var q=v[s[0]];
   lines.push(s[0]+': '+(q.min===q.max?fmtB(q.max):fmtB(q.min)+' .. '+fmtB(q.max)));});
  if(v.t_end>v.t_begin)lines.push('(range '+fmtT(v.t_begin)+' .. '+fmtT(v.t_end)+')');
  tip.textContent=lines.join('\n');tip.style.display='block';tip.style.left=Math.min(x+14,W-230)+'px';tip.style.top=(e.offsetY+10)+'px';});
 cv.addEventListener('mouseleave',function(){tip.style.display='none';});
 window.addEventListener('mouseup',function(){if(!drag)return;var a=Math.min(drag[0],drag[1]),b=Math.max(drag[0],drag[1]);drag=null;
  if(b-a>4){var t0=T(a),t1=T(b);view=[Math.max(0,t0),Math.min(tmax,t1)];}draw();});
 cv.addEventListener('dblclick',function(){view=[0,tmax];draw();});reset.addEventListener('click',function(){view=[0,tmax];draw();});
 draw();
}

function Segments(state,host){
 var segs=state.segments;if(!segs.length){host.appendChild(el('div',{'class':'sub'},'no segments'));return;}
 var W=Math.max(600,Math.min(1400,(host.clientWidth||1300)-10)),lw=150,row=13,gap=3;
 var maxs=0;segs.forEach(function(s){maxs=Math.max(maxs,s.size);});
 var H=segs.length*(row+gap)+4;var wrap=el('div',{'class':'plot',style:'max-height:420px;overflow-y:auto'});var cv=el('canvas',{width:W,height:H});var tip=el('div',{'class':'tip'});
 wrap.appendChild(cv);wrap.appendChild(tip);host.appendChild(wrap);var ctx=cv.getContext('2d');
 var FILL=['#2f6fd6','#8f5bd6','#ffffff','#c9ced8'];ctx.font='11px sans-serif';
 segs.forEach(function(s,r){var y=2+r*(row+gap),w=(W-lw-10)*s.size/maxs;ctx.fillStyle='#5b6475';ctx.textAlign='right';
  ctx.fillText(fmtB(s.size)+(s.expandable?' exp':'')+(s.large?'':' small'),lw-6,y+row-2);
  s.blocks.forEach(function(b){var x=lw+w*b[0]/s.size,bw=Math.max(1,w*b[1]/s.size);ctx.fillStyle=FILL[b[2]];ctx.fillRect(x,y,bw,row);
   if(b[2]===0&&b[3]<b[1]&&bw>3){ctx.fillStyle='#e05252';var ww=bw*(b[1]-b[3])/b[1];ctx.fillRect(x+bw-ww,y,Math.max(ww,0.5),row);}});
  ctx.strokeStyle='#7d8596';ctx.strokeRect(lw+.5,y+.5,Math.max(1,w-1),row-1);});
 cv.addEventListener('mousemove',function(e){var r=Math.floor((e.offsetY-2)/(row+gap));var s=segs[r];if(!s||e.offsetX<lw){tip.style.display='none';return;}
  var w=(W-lw-10)*s.size/maxs,off=(e.offsetX-lw)/w*s.size,hit=null;s.blocks.forEach(function(b){if(off>=b[0]&&off<b[0]+b[1])hit=b;});
  var st=['allocated','pending free (another stream)','free (cached)','many small blocks'];
  var lines=['segment '+s.addr+'  '+fmtB(s.size)];if(hit){lines.push('block +'+hit[0]+'  '+fmtB(hit[1])+'  '+st[hit[2]]);if(hit[2]<2)lines.push('requested '+fmtB(hit[3])+', rounding '+fmtB(hit[1]-hit[3]));}
  tip.textContent=lines.join('\n');tip.style.display='block';tip.style.left=Math.min(e.offsetX+14,W-260)+'px';tip.style.top=(e.offsetY+10)+'px';});
 cv.addEventListener('mouseleave',function(){tip.style.display='none';});
 var lg=el('div',{'class':'legend sub'});[['#2f6fd6','allocated'],['#e05252','rounding waste'],['#8f5bd6','pending free'],['#ffffff','free in the cache'],['#c9ced8','many blocks']].forEach(function(p){
  var s=el('span');s.appendChild(el('i',{'class':'sw',style:'background:'+p[0]+';border:1px solid #9aa3b5'}));s.appendChild(document.createTextNode(p[1]));lg.appendChild(s);});host.appendChild(lg);
 if(state.segments_total>segs.length)host.appendChild(el('div',{'class':'sub'},'the '+segs.length+' largest of '+state.segments_total+' segments are drawn'));
}

function table(host,head,rows){var t=el('table'),tr=el('tr');head.forEach(function(h,i){tr.appendChild(el('th',i?null:{'class':'l'},h));});t.appendChild(tr);
 rows.forEach(function(r){var tr=el('tr');r.forEach(function(c,i){tr.appendChild(el('td',i?null:{'class':'l'},c));});t.appendChild(tr);});host.appendChild(t);}
function stateFigures(host,s){table(host,['at '+fmtT(s.t)+' (event '+s.event+')','bytes'],[['allocated',fmtB(s.allocated)],['active',fmtB(s.active)],['requested',fmtB(s.requested)],['reserved',fmtB(s.reserved)],
 ['reserved but unallocated',fmtB(s.reserved-s.allocated)],['inactive split (non-releasable)',fmtB(s.inactive_split)],['rounding waste',fmtB(s.allocated-s.requested)],['largest free block in the cache',fmtB(s.largest_free)]]);}
function biggest(host,list){table(host,['#','size','requested','stream','allocated at','address'],list.map(function(b,i){return [String(i+1),fmtB(b.size),fmtB(b.requested),String(b.stream),fmtT(b.t)+(b.pending?' (pending free)':''),b.addr];}));}

var main=document.getElementById('main');var timelines=[];
var PCOL=['#2f6fd6','#e8912d','#3aa35b','#d62f2f','#8f5bd6','#8c564b','#e377c2','#17becf','#bcbd22','#7f7f7f'];
function Stacked(dt,host,P){
 var W=Math.max(600,Math.min(1400,(host.clientWidth||1300)-10)),H=260,ml=78,mr=12,mt=10,mb=28;
 var wrap=el('div',{'class':'plot'});var cv=el('canvas',{width:W,height:H});var tip=el('div',{'class':'tip'});
 var bar=el('div');var sel=el('select');['reserved','allocated'].forEach(function(k){sel.appendChild(el('option',{value:k},k));});bar.appendChild(document.createTextNode('series '));bar.appendChild(sel);
 wrap.appendChild(cv);wrap.appendChild(tip);host.appendChild(wrap);host.appendChild(bar);this.canvas=cv;
 var n=dt.t.length,tmin=n?dt.t[0]:0,tmax=n?dt.t[n-1]:1;if(tmax<=tmin)tmax=tmin+1;var ctx=cv.getContext('2d');var key='reserved',ymax=1;
 function X(t){return ml+(t-tmin)/(tmax-tmin)*(W-ml-mr);}function Y(v){return mt+(1-v/ymax)*(H-mt-mb);}
 function tops(i){var acc=0,o=[];dt.bands.forEach(function(b){acc+=b[key][i];o.push(acc);});return o;}
 function draw(){ymax=0;for(var i=0;i<n;i++){var tt=tops(i);if(tt.length)ymax=Math.max(ymax,tt[tt.length-1]);}if(ymax<=0)ymax=1;ymax*=1.08;
  ctx.clearRect(0,0,W,H);ctx.fillStyle='#fff';ctx.fillRect(0,0,W,H);ctx.font='11px sans-serif';ctx.fillStyle='#5b6475';ctx.strokeStyle='#e6e9ef';ctx.lineWidth=1;
  var ys=niceBytesStep(ymax,5);for(var v=0;v<=ymax;v+=ys){var y=Math.round(Y(v))+.5;ctx.beginPath();ctx.moveTo(ml,y);ctx.lineTo(W-mr,y);ctx.stroke();ctx.textAlign='right';ctx.fillText(fmtB(v),ml-6,y+4);}
  var xs=niceStep(tmax-tmin,8);for(var t=Math.ceil(tmin/xs)*xs;t<=tmax;t+=xs){var x=Math.round(X(t))+.5;ctx.textAlign='center';ctx.fillText(fmtT(t),x,H-mb+14);}
  var below=new Float64Array(n);dt.bands.forEach(function(b,bi){ctx.fillStyle=PCOL[b.process%PCOL.length];ctx.globalAlpha=0.75;ctx.beginPath();
   var v=b[key];ctx.moveTo(X(dt.t[0]),Y(below[0]+v[0]));
   for(var i=1;i<n;i++){ctx.lineTo(X(dt.t[i-1]),Y(below[i]+v[i]));ctx.lineTo(X(dt.t[i]),Y(below[i]+v[i]));}
   for(var i=n-1;i>=1;i--){ctx.lineTo(X(dt.t[i]),Y(below[i]));ctx.lineTo(X(dt.t[i-1]),Y(below[i]));}
   ctx.lineTo(X(dt.t[0]),Y(below[0]));
   ctx.closePath();ctx.fill();ctx.globalAlpha=1;for(var i=0;i<n;i++)below[i]+=b[key][i];});
  ctx.strokeStyle='#9aa3b5';ctx.strokeRect(ml+.5,mt+.5,W-ml-mr,H-mt-mb);}
 sel.addEventListener('change',function(){key=sel.value;draw();});
 cv.addEventListener('mousemove',function(e){var x=e.offsetX;if(x<ml||x>W-mr||!n){tip.style.display='none';return;}var t=tmin+(x-ml)/(W-ml-mr)*(tmax-tmin);
  var lo=0,hi=n-1;while(lo<hi){var mid=(lo+hi)>>1;if(dt.t[mid]<t)lo=mid+1;else hi=mid;}var lines=['t = '+fmtT(dt.t[lo])+' ('+key+', max over the interval)'],sum=0;
  dt.bands.slice().reverse().forEach(function(b){lines.push(b.label+': '+fmtB(b[key][lo]));sum+=b[key][lo];});lines.push('all: '+fmtB(sum));
  tip.textContent=lines.join('\n');tip.style.display='block';tip.style.left=Math.min(x+14,W-260)+'px';tip.style.top=(e.offsetY+10)+'px';});
 cv.addEventListener('mouseleave',function(){tip.style.display='none';});
 var lg=el('div',{'class':'legend sub'});dt.bands.forEach(function(b){var s=el('span');s.appendChild(el('i',{'class':'sw',style:'background:'+PCOL[b.process%PCOL.length]}));s.appendChild(document.createTextNode(b.label));lg.appendChild(s);});host.appendChild(lg);
 draw();
}
function processSection(P){
 main.appendChild(el('h2',null,'Processes and devices ('+P.processes.length+' traces)'));
 var head=['process','own device'];P.devices.forEach(function(d){head.push(d.label);});
 var rows=P.processes.map(function(p,i){var r=[p.label+(p.cross_device?'  \u26A0':''),p.own_device===null?'?':String(p.own_device%1000)];
  P.devices.forEach(function(d){var c=null;P.cells.forEach(function(x){if(x.process===i&&x.device===d.device)c=x;});
   r.push(c?fmtB(c['allocated_bytes.all.peak'])+' / '+fmtB(c['reserved_bytes.all.peak'])+(p.foreign_devices.indexOf(d.device)>=0?' *':''):'-');});return r;});
 var tot=['all processes (sum of peaks)',''];P.devices.forEach(function(d){tot.push(fmtB(d['allocated_bytes.all.peak'])+' / '+fmtB(d['reserved_bytes.all.peak']));});rows.push(tot);
 main.appendChild(el('div',{'class':'sub'},'peak allocated / peak reserved; * memory on a device other than the process\u2019s own'));table(main,head,rows);
 main.appendChild(el('pre',null,P.text));
 P.timelines.forEach(function(dt){main.appendChild(el('h3',null,dt.label+': memory of each process over time (stacked)'));var h=el('div');main.appendChild(h);stacks.push(new Stacked(dt,h,P));});
}
var stacks=[];

document.getElementById('title').textContent=DATA.title;document.title=DATA.title;
document.getElementById('subtitle').textContent=DATA.generated_by;legend();
if(DATA.processes)processSection(DATA.processes);
DATA.traces.forEach(function(tr){
 main.appendChild(el('h2',null,tr.path+(tr.workload?'  ('+tr.workload+')':'')));
 var info=[tr.format+' trace',tr.events+' events'];if(tr.incomplete)info.push('ends abruptly');main.appendChild(el('div',{'class':'sub'},info.join(', ')));
 main.appendChild(el('div',{'class':'sub'},'settings: '+(tr.settings||'(defaults)')));
 tr.notes.forEach(function(n){main.appendChild(el('div',{'class':'note'},n));});
 tr.devices.forEach(function(dev){
  main.appendChild(el('h3',null,'Device '+dev.device+': memory over time ('+fmtT(dev.duration_ms)+')'));
  var h=el('div');main.appendChild(h);timelines.push(new Timeline(dev,h));
  dev.notes.forEach(function(n){main.appendChild(el('div',{'class':'note'},n));});
  if(dev.peak){main.appendChild(el('h3',null,'Allocator state at the peak of allocated memory'));stateFigures(main,dev.peak);var sh=el('div');main.appendChild(sh);Segments(dev.peak,sh);
   main.appendChild(el('h3',null,'The biggest allocations alive at the peak'));biggest(main,dev.peak.biggest);}
  dev.ooms.forEach(function(o,i){main.appendChild(el('h3',null,(o.last_state?'Last state (the trace ends abruptly)':'OOM '+(i+1))+' at '+fmtT(o.state.t)));
   main.appendChild(el('div',{'class':'diag'},'Diagnosis: '+o.diagnosis+' \u2014 '+o.headline));o.reasons.forEach(function(r){main.appendChild(el('div',{'class':'sub'},'because '+r));});
   if(o.next_step)main.appendChild(el('div',null,'Next step: '+o.next_step));if(o.request!==null)main.appendChild(el('div',null,'request '+fmtB(o.request)+', free on the device '+fmtB(o.device_free)));
   stateFigures(main,o.state);var oh=el('div');main.appendChild(oh);Segments(o.state,oh);});
  main.appendChild(el('h3',null,'Summary (torch.cuda.memory_summary layout)'));main.appendChild(el('pre',null,dev.summary_table));
  main.appendChild(el('h3',null,'Still allocated at the end: '+dev.end.live_blocks+' blocks, '+fmtB(dev.end.live_bytes)));biggest(main,dev.end.biggest);
 });
});
// Probe for tests: values read back through the same code the tooltip uses, and drawn pixels.
var probe={errors:errors,devices:[]};
DATA.traces.forEach(function(tr){tr.devices.forEach(function(dev){var p={trace:tr.path,device:dev.device};
 if(dev.peak){p.peak_t=dev.peak.t;p.at_peak=valuesAt(dev,dev.peak.t);}var n=dev.tl.t.length;p.buckets=n;
 var mx=0;for(var i=0;i<n;i++)mx=Math.max(mx,dev.tl.amax[i]);p.max_allocated=mx;p.end_reserved=n?dev.tl.rlast[n-1]:null;probe.devices.push(p);});});
try{probe.drawn_pixels=timelines.map(function(tl){var c=tl.canvas,d=c.getContext('2d').getImageData(0,0,c.width,c.height).data,k=0;
 for(var i=0;i<d.length;i+=4){if(d[i]<250||d[i+1]<250||d[i+2]<250)k++;}return k;});}catch(e){errors.push('probe: '+e.message);}
if(DATA.processes){probe.processes={cross_device:DATA.processes.cross_device,stacks:stacks.length};
 try{probe.processes.stack_pixels=stacks.map(function(s){var c=s.canvas,d=c.getContext('2d').getImageData(0,0,c.width,c.height).data,k=0;
  for(var i=0;i<d.length;i+=4){if(d[i]<250||d[i+1]<250||d[i+2]<250)k++;}return k;});}catch(e){errors.push('probe: '+e.message);}}
document.getElementById('vt-probe').textContent=JSON.stringify(probe);
})();
</script></body></html>
)PAGE";

}  // namespace

std::string json_for_script(const nlohmann::json& j) {
  std::string s = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string out;
  out.reserve(s.size() + s.size() / 16);
  for (std::size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '<') {
      out += "\\u003c";
    } else if (c == '>') {
      out += "\\u003e";
    } else if (c == '&') {
      out += "\\u0026";
    } else if (static_cast<unsigned char>(c) == 0xE2 && i + 2 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x80 &&
               (static_cast<unsigned char>(s[i + 2]) == 0xA8 || static_cast<unsigned char>(s[i + 2]) == 0xA9)) {
      out += static_cast<unsigned char>(s[i + 2]) == 0xA8 ? "\\u2028" : "\\u2029";
      i += 2;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

nlohmann::json report_data(const std::vector<TraceModel>& models, const ReportOptions& o) {
  nlohmann::json j;
  std::string title = o.title;
  if (title.empty()) {
    // Each distinct workload once (the ranks of a job share their command line).
    std::vector<std::string> seen;
    for (const auto& m : models) {
      std::string w = m.header.workload.empty() ? m.header.path : m.header.workload;
      if (std::find(seen.begin(), seen.end(), w) != seen.end()) continue;
      seen.push_back(w);
      title += (title.empty() ? "" : ", ") + w;
    }
    title = "vramtrace report: " + title;
    if (models.size() > 1 && seen.size() < models.size()) title += fmt::format(" ({} processes)", models.size());
  }
  j["title"] = title;
  j["generated_by"] = "vramtrace " VRAMTRACE_REPORT_VERSION " report";
  nlohmann::json traces = nlohmann::json::array();
  for (const auto& m : models) {
    auto cases = oom_cases(m);
    nlohmann::json t = trace_identity_json(m);
    nlohmann::json devs = nlohmann::json::array();
    for (const auto& d : m.devices) {
      const i64 t0 = d.first_time_ns;
      nlohmann::json dj;
      dj["device"] = d.device;
      dj["duration_ms"] = ms(d.last_time_ns - t0);
      if (const std::uint64_t total = m.header.total_bytes_of(d.device))
        dj["capacity"] = total;
      else
        dj["capacity"] = nullptr;
      nlohmann::json tl;
      std::vector<double> tb, te;
      std::array<std::vector<i64>, 4> mn, mx, last;
      for (const auto& b : d.timeline) {
        tb.push_back(ms(b.t_begin_ns - t0));
        te.push_back(ms(b.t_end_ns - t0));
        for (int k = 0; k < 4; ++k) {
          mn[k].push_back(b.min[k]);
          mx[k].push_back(b.max[k]);
          last[k].push_back(b.last[k]);
        }
      }
      tl["t"] = tb;
      tl["te"] = te;
      const char* keys[4] = {"a", "c", "r", "q"};  // allocated, active, reserved, requested
      for (int k = 0; k < 4; ++k) {
        tl[std::string(keys[k]) + "min"] = mn[k];
        tl[std::string(keys[k]) + "max"] = mx[k];
        tl[std::string(keys[k]) + "last"] = last[k];
      }
      dj["tl"] = tl;
      nlohmann::json markers = nlohmann::json::array();
      for (const auto& mk : d.markers) markers.push_back({{"t", ms(mk.time_ns - t0)}, {"kind", mk.kind}, {"value", mk.value}});
      dj["markers"] = markers;
      if (d.at_peak.captured) dj["peak"] = state_json(d.at_peak, t0, o);
      nlohmann::json ooms = nlohmann::json::array();
      for (const auto& c : cases) {
        if (c.device != d.device || !c.state) continue;
        nlohmann::json oj;
        oj["last_state"] = c.last_state;
        oj["diagnosis"] = diagnosis_code_name(c.diagnosis.code);
        oj["headline"] = c.diagnosis.headline;
        oj["reasons"] = c.diagnosis.reasons;
        oj["next_step"] = c.diagnosis.next_step;
        oj["request"] = c.figures.request ? nlohmann::json(*c.figures.request) : nlohmann::json(nullptr);
        oj["device_free"] = c.figures.device_free ? nlohmann::json(*c.figures.device_free) : nlohmann::json(nullptr);
        oj["state"] = state_json(*c.state, t0, o);
        ooms.push_back(oj);
      }
      dj["ooms"] = ooms;
      dj["summary_table"] = memory_summary_table(d.stats, d.device);
      dj["end"] = {{"live_blocks", d.at_end.stats.active[kStatAll].current},
                   {"live_bytes", d.at_end.stats.active_bytes[kStatAll].current},
                   {"biggest", biggest_json(d.at_end.biggest, t0)}};
      dj["notes"] = d.notes;
      devs.push_back(dj);
    }
    t["devices"] = devs;
    traces.push_back(t);
  }
  j["traces"] = traces;
  if (models.size() > 1) {
    // Several processes: the process x device view and per device one stacked band per process.
    ProcessDeviceView view = process_device_view(models);
    nlohmann::json pj = process_device_json(view);
    pj["text"] = render_process_device_text(view);
    pj["timelines"] = process_device_timelines_json(models, view);
    j["processes"] = pj;
  }
  return j;
}

std::string render_report_html(const std::vector<TraceModel>& models, const ReportOptions& options) {
  std::string page = kPage;
  const std::string marker = "@DATA@";
  auto pos = page.find(marker);
  return page.substr(0, pos) + json_for_script(report_data(models, options)) + page.substr(pos + marker.size());
}

}  // namespace vramtrace

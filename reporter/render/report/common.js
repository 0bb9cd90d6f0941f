var errors=[];
window.addEventListener('error',function(e){errors.push(String(e.message));});
var DATA=JSON.parse(document.getElementById('vt-data').textContent);
// Note [devices in the page] in report_html.cpp: a page of many ranks leaves out what is empty
// and writes the process view as columns; here they become the fields and objects the sections read.
function rowsOf(c){var k=Object.keys(c),n=k.length?c[k[0]].length:0,out=[];
 for(var i=0;i<n;i++){var o={};k.forEach(function(x){o[x]=c[x][i];});out.push(o);}return out;}
DATA.traces.forEach(function(tr){tr.workload=tr.w!==undefined?DATA.workloads[tr.w]:'';tr.notes=tr.notes||[];tr.stacks=tr.stacks||null;
 tr.devices.forEach(function(dev){dev.notes=dev.notes||[];});});
(function(P){if(!P)return;
 P.processes=rowsOf(P.rows).map(function(r){return {index:r.i,label:P.labels[r.i],path:P.paths[r.i],own_device:r.own,foreign_devices:r.foreign,cross_device:r.foreign.length>0};});
 P.cells=rowsOf(P.cells).map(function(c){return {process:c.p,device:c.d,'allocated_bytes.all.peak':c.a,'reserved_bytes.all.peak':c.r};});
 P.devices=rowsOf(P.devices).map(function(d){return {device:d.device,label:d.label,'allocated_bytes.all.peak':d.a,'reserved_bytes.all.peak':d.r,processes:d.n};});
 P.cross_device=P.cross.map(function(i){return P.labels[i];});
 // Each band's values from their differences.
 function sums(d){var out=new Array(d.length),acc=0;for(var i=0;i<d.length;i++){acc+=d[i];out[i]=acc;}return out;}
 P.timelines.forEach(function(dt){dt.bands.forEach(function(b){b.process=b.p;b.label=P.labels[b.p];b.reserved=sums(b.r);b.allocated=sums(b.a);});});})(DATA.processes);
// Note [the timeline in the page] in report_html.cpp: each device's buckets from their short
// whole numbers into the arrays the charts read (times in ms, as ns / 1e6, values in bytes).
// Typed arrays: the charts read them for every bucket in view at each redraw.
function decodeTimeline(e){var n=e.b.length,tl={t:new Float64Array(n),te:new Float64Array(n)},end=0;
 for(var i=0;i<n;i++){var b=end+e.b[i];end=b+e.d[i];tl.t[i]=b/1e6;tl.te[i]=end/1e6;}
 ['a','c','r','q'].forEach(function(k){var last=0,L=new Float64Array(n),mn=new Float64Array(n),mx=new Float64Array(n);
  for(var i=0;i<n;i++){last+=e[k+'l'][i];L[i]=last;mn[i]=last-e[k+'n'][i];mx[i]=last+e[k+'x'][i];}
  tl[k+'last']=L;tl[k+'min']=mn;tl[k+'max']=mx;});
 // The exact points around the peak (Note [the timeline's exact points around the peak]): xt their
 // times (ms), xa, xc, xr, xq each series after each point's event.
 var x=e.x,m=x?x.t.length:0;tl.xt=new Float64Array(m);var tx=0;for(var i=0;i<m;i++){tx+=x.t[i];tl.xt[i]=tx/1e6;}
 ['a','c','r','q'].forEach(function(k){var v=new Float64Array(m),acc=0;for(var i=0;i<m;i++){acc+=x[k][i];v[i]=acc;}tl['x'+k]=v;});
 return tl;}
DATA.traces.forEach(function(tr){tr.devices.forEach(function(dev){dev.tl=decodeTimeline(dev.tl);});});
// Okabe and Ito's colour-blind-safe palette: every pair of the plot's series, and of the segment
// map's block states, stays apart (CIELAB distance at least 15) under simulated protanopia,
// deuteranopia and tritanopia as well (the browser test checks it).
var COLORS={reserved:'#E69F00',active:'#009E73',allocated:'#0072B2',requested:'#CC79A7',cap:'#D55E00',
 pending:'#CC79A7',waste:'#D55E00',free:'#ffffff',many:'#c9ced8'};
var SERIES=[['reserved','r'],['active','c'],['allocated','a']];
// Shows `tip` with `text` beside the cursor (x, y: pixels in the tip's container, W its width) and
// keeps it inside the container: to the cursor's right where it fits, else to its left, else at
// the left edge. Measured at the left edge after the text is set (the CSS wraps lines at 520 px),
// so a long diagnosis is not cut by the window.
function placeTip(tip,text,x,y,W){tip.textContent=text;tip.style.left='0px';tip.style.display='block';var w=tip.offsetWidth,l=x+14;
 if(l+w>W)l=x-14-w;tip.style.left=Math.max(0,l)+'px';tip.style.top=(y+10)+'px';}
function el(tag,attrs,text){var e=document.createElement(tag);if(attrs)for(var k in attrs)e.setAttribute(k,attrs[k]);if(text!==undefined)e.textContent=String(text);return e;}
function fmtB(b){if(b===null||b===undefined)return 'n/a';var n=Math.abs(b),s=b<0?'-':'';
 if(n<=1024)return s+n+' bytes';if(n<=1048576)return s+(n/1024).toFixed(2)+' KiB';if(n<=1073741824)return s+(n/1048576).toFixed(2)+' MiB';return s+(n/1073741824).toFixed(2)+' GiB';}
function fmtT(ms){var a=Math.abs(ms);if(ms===0)return '0';if(a>=1000)return (ms/1000).toFixed(3)+' s';if(a>=1)return ms.toFixed(3)+' ms';return (ms*1000).toFixed(1)+' us';}
function niceStep(range,n){var raw=range/Math.max(1,n),p=Math.pow(10,Math.floor(Math.log10(raw))),f=raw/p;return (f<1.5?1:f<3?2:f<7?5:10)*p;}
// One unit for every tick of an axis: the unit of its largest value. inUnit writes v in it with the
// decimals the step needs (a step of 0.25 GiB: two).
function byteUnit(max){var G=1073741824,M=1048576;return max>=2*G?{name:'GiB',div:G}:max>=2*M?{name:'MiB',div:M}:max>=2048?{name:'KiB',div:1024}:{name:'bytes',div:1};}
function timeUnit(span){return span>=2000?{name:'s',div:1000}:span>=2?{name:'ms',div:1}:{name:'\u00b5s',div:0.001};}
function inUnit(v,u,step){var st=step/u.div,d=0;
 while(d<6&&Math.abs(st*Math.pow(10,d)-Math.round(st*Math.pow(10,d)))>1e-6*Math.max(1,st*Math.pow(10,d)))d++;return (v/u.div).toFixed(d);}
function niceBytesStep(range,n){var u=byteUnit(range).div;return niceStep(range/u,n)*u;}
// Values at time t (ms from the device's first event): the bucket holding t.
function bucketAt(tl,t){var lo=0,hi=tl.t.length-1;if(hi<0)return -1;if(t<tl.t[0])return 0;
 while(lo<hi){var mid=(lo+hi+1)>>1;if(tl.t[mid]<=t)lo=mid;else hi=mid-1;}return lo;}
// Between two buckets nothing happened: the values are the earlier bucket's last ones, held until
// the next bucket begins (gap: true, t_begin .. t_end is the idle stretch).
// Within the exact points' span, the value after the last event at or before t, exactly (exact:
// true, t_begin .. t_end the events around it).
function exactAt(tl,t){var m=tl.xt.length;if(!m||t<tl.xt[0]||t>tl.xt[m-1])return -1;var lo=0,hi=m-1;
 while(lo<hi){var mid=(lo+hi+1)>>1;if(tl.xt[mid]<=t)lo=mid;else hi=mid-1;}return lo;}
function valuesAt(dev,t){var tl=dev.tl,j=exactAt(tl,t);
 if(j>=0){var m=tl.xt.length,o={bucket:-1,exact:true,gap:false,t_begin:tl.xt[j],t_end:j+1<m?tl.xt[j+1]:tl.xt[j]};
  SERIES.concat([['requested','q']]).forEach(function(s){var v=tl['x'+s[1]][j];o[s[0]]={min:v,max:v,last:v};});return o;}
 var i=bucketAt(tl,t);if(i<0)return null;var n=tl.t.length;
 var gap=t>tl.te[i]&&i+1<n;var o={bucket:i,gap:gap,t_begin:gap?tl.te[i]:tl.t[i],t_end:gap?tl.t[i+1]:tl.te[i]};
 SERIES.concat([['requested','q']]).forEach(function(s){var last=tl[s[1]+'last'][i];
  o[s[0]]=gap?{min:last,max:last,last:last}:{min:tl[s[1]+'min'][i],max:tl[s[1]+'max'][i],last:last};});return o;}
function legend(){var L=document.getElementById('legend');[['allocated','allocated'],['active','active (allocated + pending free)'],['reserved','reserved (segments)'],['cap','capacity']].forEach(function(p){
 var s=el('span');s.appendChild(el('i',{'class':'sw',style:'background:'+COLORS[p[0]]}));s.appendChild(document.createTextNode(p[1]));L.appendChild(s);});
 L.appendChild(el('span',null,'\u25BC OOM'));L.appendChild(el('span',null,'\u25CF peak'));L.appendChild(el('span',null,'\u2758 mark'));L.appendChild(el('span',{'class':'sub'},'drag to zoom, double-click to reset'));}

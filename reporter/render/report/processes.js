var main=document.getElementById('main');var timelines=[];
// Paul Tol's muted palette for processes, apart from each other under colour-vision deficiency too.
var PCOL=['#332288','#88CCEE','#44AA99','#117733','#999933','#DDCC77','#CC6677','#882255','#AA4499'];
// One device's memory per process, stacked. Value i of a band is the process's maximum over the
// interval (t[i-1], t[i]], drawn as a step over that interval; drag to zoom into a time range
// (the y axis fits the view), double-click or "reset zoom" to go back; the tooltip names the
// interval under the cursor and each process's value over it.
function Stacked(dt,host,P){
 var self=this,W=Math.max(600,Math.min(1400,(host.clientWidth||1300)-10)),H=260,ml=78,mr=12,mt=10,mb=28,dpr=window.devicePixelRatio||1;
 var wrap=el('div',{'class':'plot'});var cv=el('canvas',{width:Math.round(W*dpr),height:Math.round(H*dpr),style:'width:'+W+'px;height:'+H+'px'});var tip=el('div',{'class':'tip'});
 var bar=el('div');var sel=el('select');['reserved','allocated'].forEach(function(k){sel.appendChild(el('option',{value:k},k));});bar.appendChild(document.createTextNode('series '));bar.appendChild(sel);
 var reset=el('button',null,'reset zoom');bar.appendChild(reset);
 wrap.appendChild(cv);wrap.appendChild(tip);host.appendChild(wrap);host.appendChild(bar);this.canvas=cv;
 var n=dt.t.length,tmin=n?dt.t[0]:0,tmax=n?dt.t[n-1]:1;if(tmax<=tmin)tmax=tmin+1;var ctx=cv.getContext('2d');var key='reserved',ymax=1,view=[tmin,tmax];
 var minSpan=Math.max(1e-6,Math.abs(tmax)*1e-12);
 function X(t){return ml+(t-view[0])/(view[1]-view[0])*(W-ml-mr);}function T(x){return view[0]+(x-ml)/(W-ml-mr)*(view[1]-view[0]);}
 function Y(v){return mt+(1-v/ymax)*(H-mt-mb);}
 function sumAt(i){var acc=0;dt.bands.forEach(function(b){acc+=b[key][i];});return acc;}
 // The interval holding t: the first i with t[i] >= t (interval (t[i-1], t[i]]).
 function intervalAt(t){var lo=0,hi=n-1;while(lo<hi){var mid=(lo+hi)>>1;if(dt.t[mid]<t)lo=mid+1;else hi=mid;}return lo;}
 // The intervals that reach into the view: [first, last].
 function inView(){var a=Math.max(1,intervalAt(view[0])),z=Math.min(n-1,intervalAt(view[1]));return [a,Math.max(a,z)];}
 function axes(){ctx.font='11px sans-serif';ctx.fillStyle='#5b6475';ctx.strokeStyle='#e6e9ef';ctx.lineWidth=1;
  var ys=niceBytesStep(ymax,5),yu=byteUnit(ymax);for(var v=0;v<=ymax;v+=ys){var y=Math.round(Y(v))+.5;ctx.beginPath();ctx.moveTo(ml,y);ctx.lineTo(W-mr,y);ctx.stroke();ctx.textAlign='right';ctx.fillText(inUnit(v,yu,ys)+' '+yu.name,ml-6,y+4);}
  var span=view[1]-view[0],xs=niceStep(span,8),xu=timeUnit(span);
  for(var t=Math.ceil(view[0]/xs)*xs,g=0;t<=view[1]+xs*1e-9&&g<200;t+=xs,g++){var x=Math.round(X(t))+.5,label=inUnit(t,xu,xs)+' '+xu.name,lw=ctx.measureText(label).width;
   ctx.textAlign=x+lw/2>W-2?'right':x-lw/2<2?'left':'center';ctx.fillText(label,x,H-mb+14);}}
 function band(b,below,r){var v=b[key],i0=r[0],i1=r[1];ctx.beginPath();
  ctx.moveTo(X(dt.t[i0-1]),Y(below[i0]));
  for(var i=i0;i<=i1;i++){ctx.lineTo(X(dt.t[i-1]),Y(below[i]+v[i]));ctx.lineTo(X(dt.t[i]),Y(below[i]+v[i]));}
  for(var i=i1;i>=i0;i--){ctx.lineTo(X(dt.t[i]),Y(below[i]));ctx.lineTo(X(dt.t[i-1]),Y(below[i]));}
  ctx.closePath();ctx.fill();}
 function draw(drag){ctx.setTransform(dpr,0,0,dpr,0,0);ctx.clearRect(0,0,W,H);ctx.fillStyle='#fff';ctx.fillRect(0,0,W,H);
  var r=n>1?inView():[1,0];ymax=0;for(var i=r[0];i<=r[1];i++)ymax=Math.max(ymax,sumAt(i));if(ymax<=0)ymax=1;ymax*=1.08;axes();
  ctx.save();ctx.beginPath();ctx.rect(ml,mt,W-ml-mr,H-mt-mb);ctx.clip();
  var below=new Float64Array(n);dt.bands.forEach(function(b){ctx.fillStyle=PCOL[b.process%PCOL.length];ctx.globalAlpha=0.75;if(r[1]>=r[0])band(b,below,r);ctx.globalAlpha=1;
   for(var i=0;i<n;i++)below[i]+=b[key][i];});ctx.restore();
  ctx.strokeStyle='#9aa3b5';ctx.strokeRect(ml+.5,mt+.5,W-ml-mr,H-mt-mb);
  if(drag){ctx.fillStyle='rgba(47,111,214,.12)';ctx.fillRect(Math.min(drag[0],drag[1]),mt,Math.abs(drag[1]-drag[0]),H-mt-mb);}}
 function tipText(t){var i=intervalAt(t),lines=[(i>0?fmtT(dt.t[i-1])+' .. ':'t = ')+fmtT(dt.t[i])+' ('+key+', each process\u2019s maximum over the interval)'],sum=0;
  dt.bands.slice().reverse().forEach(function(b){lines.push(b.label+': '+fmtB(b[key][i]));sum+=b[key][i];});lines.push('all: '+fmtB(sum));return {i:i,text:lines.join('\n')};}
 sel.addEventListener('change',function(){key=sel.value;draw();});
 var drag=null;
 cv.addEventListener('mousedown',function(e){drag=[e.offsetX,e.offsetX];});
 cv.addEventListener('mousemove',function(e){var x=e.offsetX;if(drag){drag[1]=x;draw(drag);}
  if(x<ml||x>W-mr||!n){tip.style.display='none';return;}self.tipAt=tipText(T(x));placeTip(tip,self.tipAt.text,x,e.offsetY,W);});
 cv.addEventListener('mouseleave',function(){tip.style.display='none';});
 window.addEventListener('mouseup',function(){if(!drag)return;var a=Math.min(drag[0],drag[1]),b=Math.max(drag[0],drag[1]);drag=null;
  if(b-a>4){var t0=Math.max(tmin,T(a)),t1=Math.min(tmax,T(b));if(t1-t0>minSpan)view=[t0,t1];}draw();});
 function unzoom(){view=[tmin,tmax];draw();}
 cv.addEventListener('dblclick',unzoom);reset.addEventListener('click',unzoom);
 this.view=function(){return view.slice();};this.xOf=X;this.yOf=Y;this.key=function(){return key;};
 var lg=el('div',{'class':'legend sub'});dt.bands.forEach(function(b){var s=el('span');s.appendChild(el('i',{'class':'sw',style:'background:'+PCOL[b.process%PCOL.length]}));s.appendChild(document.createTextNode(b.label));lg.appendChild(s);});host.appendChild(lg);
 draw();
}
// Past this many devices the process x device table would be unreadable (a column a device):
// the page shows one row a process instead, with its own device and the others it holds memory on.
var MATRIX_DEVICES=32,EAGER_STACKS=32;
function processSection(P){
 main.appendChild(el('h2',null,'Processes and devices ('+P.labels.length+' traces)'));
 function cell(c){return fmtB(c['allocated_bytes.all.peak'])+' / '+fmtB(c['reserved_bytes.all.peak']);}
 function own(p){return p.own_device===null?'?':String(p.own_device%1000);}
 if(P.devices.length<=MATRIX_DEVICES){
  var head=['process','own device'];P.devices.forEach(function(d){head.push(d.label);});
  var at={};P.cells.forEach(function(x){at[x.process+' '+x.device]=x;});
  var rows=P.processes.map(function(p){var r=[p.label+(p.cross_device?'  \u26A0':''),own(p)];
   P.devices.forEach(function(d){var c=at[p.index+' '+d.device]||null;
    r.push(c?cell(c)+(p.foreign_devices.indexOf(d.device)>=0?' *':''):'-');});return r;});
  var tot=['all processes (sum of peaks)',''];P.devices.forEach(function(d){tot.push(cell(d));});rows.push(tot);
  main.appendChild(el('div',{'class':'sub'},'peak allocated / peak reserved; * memory on a device other than the process\u2019s own'));table(main,head,rows).id='process-matrix';
 }else{
  var name={};P.devices.forEach(function(d){name[d.device]=d.label;});
  var by={};P.cells.forEach(function(c){(by[c.process]=by[c.process]||[]).push(c);});
  var rows=P.processes.map(function(p){var mine=null,other=[];
   (by[p.index]||[]).forEach(function(c){if(c.device===p.own_device)mine=c;else other.push(name[c.device]+': '+cell(c)+(p.foreign_devices.indexOf(c.device)>=0?' *':''));});
   return [p.label+(p.cross_device?'  \u26A0':''),own(p),mine?cell(mine):'-',other.length?other.join('; '):'-'];});
  main.appendChild(el('div',{'class':'sub'},'one row a process ('+P.devices_count+' devices): peak allocated / peak reserved on its own device and on any other; * memory on a device other than the process\u2019s own'));
  table(main,['process','own device','on its own device','on other devices'],rows).id='process-list';
 }
 // What the view itself says of these processes (devices it could not map, processes that ran one after another).
 (P.notes||[]).forEach(function(n){main.appendChild(el('div',{'class':'note process-note'},n));});
 if(P.more)main.appendChild(el('div',{'class':'note',id:'processes-more'},P.more.count+' more processes are not in this table (peak reserved '+fmtB(P.more.min)+' min, '+fmtB(P.more.median)+' median, '+fmtB(P.more.max)+' max; processes with an OOM and the highest peaks are shown): vramtrace summary DIR, on the directory of these traces, lists each'));
 // The same table as text, for copying, folded away so that the page shows it once.
 // Left out of a page of many processes (vramtrace summary prints it).
 if(P.text){var det=el('details');det.appendChild(el('summary',null,'the table as text'));det.appendChild(el('pre',null,P.text));main.appendChild(det);}
 else main.appendChild(el('div',{'class':'note'},'the table as text is not in this page (too large): vramtrace summary on these traces prints it'));
 // A job of many devices has as many charts: past EAGER_STACKS each is drawn when it comes near
 // the window (a canvas each, about 1.4 MB of pixels: a thousand at once would not load).
 var lazy=P.timelines.length>EAGER_STACKS&&window.IntersectionObserver,io=lazy?new IntersectionObserver(function(es){es.forEach(function(e){
  if(!e.isIntersecting)return;io.unobserve(e.target);e.target.style.minHeight='';stacks.push(new Stacked(e.target.vtChart,e.target,P));});},{rootMargin:'600px'}):null;
 P.timelines.forEach(function(dt){main.appendChild(el('h3',null,dt.label+': memory of each process over time (stacked)'));var h=el('div');main.appendChild(h);
  if(io){h.vtChart=dt;h.style.minHeight='320px';io.observe(h);}else stacks.push(new Stacked(dt,h,P));});
}
// Note [devices in the page] (report_html.cpp): the devices without a section of their own, one
// row each, by peak reserved.
function otherDevices(O){var n=O.device.length;
 main.appendChild(el('h2',{id:'other-devices'},'Other devices ('+n+(O.more?' of '+(n+O.more.count):'')+')'));
 main.appendChild(el('div',{'class':'sub'},'devices without a section of their own, by peak reserved'+(DATA.processes?'; their memory over time is in the stacked chart of their device above':'')));
 var P=DATA.processes,rows=[];for(var i=0;i<n;i++)rows.push([O.p?P.labels[O.p[i]]+' ('+P.paths[O.p[i]]+')':O.path[i],String(O.device[i]),fmtB(O.peak_allocated[i]),fmtB(O.peak_reserved[i]),
  O.capacity[i]===null?'n/a':fmtB(O.capacity[i]),String(O.ooms[i]),fmtT(O.duration_ms[i])]);
 table(main,['process / trace','device','peak allocated','peak reserved','capacity','OOMs','duration'],rows).id='other-devices-table';
 if(O.more)main.appendChild(el('div',{'class':'note',id:'other-devices-more'},O.more.count+' more devices are not in this table (peak reserved '+fmtB(O.more.min)+' min, '+fmtB(O.more.median)+' median, '+fmtB(O.more.max)+' max; devices with an OOM and the highest peaks are shown): vramtrace summary DIR, on the directory of these traces, lists each'));
}
var stacks=[];

var main=document.getElementById('main');var timelines=[];
// Paul Tol's muted palette for processes, apart from each other under colour-vision deficiency too.
var PCOL=['#332288','#88CCEE','#44AA99','#117733','#999933','#DDCC77','#CC6677','#882255','#AA4499'];
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
  var lo=0,hi=n-1;while(lo<hi){var mid=(lo+hi)>>1;if(dt.t[mid]<t)lo=mid+1;else hi=mid;}var lines=[(lo>0?fmtT(dt.t[lo-1])+' .. ':'t = ')+fmtT(dt.t[lo])+' ('+key+', max over the interval)'],sum=0;
  dt.bands.slice().reverse().forEach(function(b){lines.push(b.label+': '+fmtB(b[key][lo]));sum+=b[key][lo];});lines.push('all: '+fmtB(sum));
  placeTip(tip,lines.join('\n'),x,e.offsetY,W);});
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
 // The same table as text, for copying, folded away so that the page shows it once.
 var det=el('details');det.appendChild(el('summary',null,'the table as text'));det.appendChild(el('pre',null,P.text));main.appendChild(det);
 P.timelines.forEach(function(dt){main.appendChild(el('h3',null,dt.label+': memory of each process over time (stacked)'));var h=el('div');main.appendChild(h);stacks.push(new Stacked(dt,h,P));});
}
var stacks=[];

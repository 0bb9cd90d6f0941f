function Timeline(dev,host){
 var self=this;this.dev=dev;var H=320,ml=78,mr=14,mt=10,mb=40;
 function width(){return Math.max(600,Math.min(1800,(host.clientWidth||1300)-10));}
 var W=width(),dpr=1;
 var wrap=el('div',{'class':'plot'});var cv=el('canvas');var tip=el('div',{'class':'tip'});
 // The canvas has devicePixelRatio pixels per CSS pixel (crisp on high-DPI screens); everything
 // below draws in CSS pixels. It follows the window's width.
 function size(){W=width();dpr=window.devicePixelRatio||1;cv.width=Math.round(W*dpr);cv.height=Math.round(H*dpr);cv.style.width=W+'px';cv.style.height=H+'px';}
 size();
 var bar=el('div');var reset=el('button',null,'reset zoom');bar.appendChild(reset);
 wrap.appendChild(cv);wrap.appendChild(tip);host.appendChild(wrap);host.appendChild(bar);this.canvas=cv;
 var tl=dev.tl,n=tl.t.length,tmax=n?tl.te[n-1]:1;if(tmax<=0)tmax=1;var view=[0,tmax];
 var ymax=1,capIn=false;  // of the view: set by each draw
 // The narrowest view: a nanosecond, and far above the spacing of doubles at tmax, so that the
 // ticks always advance (a drag that ends in a margin, or past it, leaves the view as it was).
 var minSpan=Math.max(1e-6,tmax*1e-12);
 var ctx=cv.getContext('2d');
 // Each OOM marker with its case (the dev.ooms entry whose state is at its time, else the next in
 // order) and the anchor of that case's section (page.js names it).
 var cases=dev.ooms.filter(function(o){return !o.last_state;}),used=[];
 var oomMarks=dev.markers.filter(function(m){return m.kind==='oom';}).map(function(m,k){
  var c=-1;cases.forEach(function(o,j){if(c<0&&used.indexOf(j)<0&&o.state&&Math.abs(o.state.t-m.t)<1e-6)c=j;});
  if(c<0)cases.forEach(function(o,j){if(c<0&&used.indexOf(j)<0)c=j;});if(c>=0)used.push(c);
  var o=c>=0?cases[c]:null;return {t:m.t,request:m.value,oom:o,anchor:o?o.anchor:null};});
 var peak=dev.peak&&typeof dev.peak.allocated==='number'?dev.peak:null;
 var marks=dev.markers.filter(function(m){return m.kind==='mark';});
 function markAt(x,y){for(var k=0;k<oomMarks.length;k++){var o=oomMarks[k];if(o.t<view[0]||o.t>view[1])continue;if(Math.abs(X(o.t)-x)<=5){
    var lines=['OOM at '+fmtT(o.t)+(o.request?', request '+fmtB(o.request):'')];
    if(o.oom){lines.push('Diagnosis: '+o.oom.diagnosis+' \u2014 '+o.oom.headline);if(o.oom.next_step)lines.push('Next step: '+o.oom.next_step);lines.push(o.oom.state?'(click: the state at this OOM, below the chart)':'(click: its section)');}
    return {text:lines.join('\n'),oom:o};}}
  if(y>=H-mb-12&&y<=H-mb+2)for(var k=0;k<marks.length;k++){var m=marks[k];if(m.t>=view[0]&&m.t<=view[1]&&Math.abs(X(m.t)-x)<=3)
   return {text:'mark '+(m.name!==undefined?'\u201c'+m.name+'\u201d ':'')+'at '+fmtT(m.t)};}
  if(peak&&peak.t>=view[0]&&peak.t<=view[1]&&Math.abs(X(peak.t)-x)<=6&&Math.abs(Y(peak.allocated)-y)<=8)
   return {text:'Peak of allocated memory: '+fmtB(peak.allocated)+' at '+fmtT(peak.t)+'\nreserved then '+fmtB(peak.reserved)+' (its state: the section below)'};
  return null;}
 // Grid, ticks in one unit per axis (as few decimals as the step needs) and the axis titles.
 function axes(){ctx.font='11px sans-serif';ctx.fillStyle='#5b6475';ctx.strokeStyle='#e6e9ef';ctx.lineWidth=1;
  var ys=niceBytesStep(ymax,6),yu=byteUnit(ymax);for(var v=0;v<=ymax;v+=ys){var y=Math.round(Y(v))+.5;ctx.beginPath();ctx.moveTo(ml,y);ctx.lineTo(W-mr,y);ctx.stroke();
   ctx.textAlign='right';ctx.fillText(inUnit(v,yu,ys),ml-6,y+4);}
  var span=view[1]-view[0],xs=niceStep(span,Math.max(4,Math.floor((W-ml-mr)/110))),xu=timeUnit(span);
  for(var t=Math.ceil(view[0]/xs)*xs,guard=0;t<=view[1]+xs*1e-9&&guard<200;t+=xs,guard++){var x=Math.round(X(t))+.5;ctx.beginPath();ctx.moveTo(x,mt);ctx.lineTo(x,H-mb);ctx.stroke();
   var label=inUnit(t,xu,xs),lw=ctx.measureText(label).width;ctx.textAlign=x+lw/2>W-2?'right':x-lw/2<2?'left':'center';ctx.fillText(label,x,H-mb+14);}
  ctx.fillStyle='#1d2433';ctx.textAlign='center';ctx.fillText('time since the first event ('+xu.name+')',ml+(W-ml-mr)/2,H-6);
  ctx.save();ctx.translate(12,mt+(H-mt-mb)/2);ctx.rotate(-Math.PI/2);ctx.fillText('memory ('+yu.name+')',0,0);ctx.restore();}
 function X(t){return ml+(t-view[0])/(view[1]-view[0])*(W-ml-mr);}
 function T(x){return view[0]+(x-ml)/(W-ml-mr)*(view[1]-view[0]);}
 function Y(v){return mt+(1-v/ymax)*(H-mt-mb);}
 // Per-pixel-column minimum and maximum of each series (SERIES order), reused across redraws.
 var pmin=[],pmax=[];
 function draw(sel){ctx.setTransform(dpr,0,0,dpr,0,0);ctx.clearRect(0,0,W,H);ctx.fillStyle='#fff';ctx.fillRect(0,0,W,H);
  var cols=W-ml-mr,ns=SERIES.length;
  if(!pmin.length||pmin[0].length!==cols){pmin=[];pmax=[];for(var k=0;k<ns;k++){pmin.push(new Float64Array(cols));pmax.push(new Float64Array(cols));}}
  for(var k=0;k<ns;k++){pmin[k].fill(NaN);pmax[k].fill(NaN);}
  // A bucket covers [t, te]; after it, until the next bucket, its last values hold (an idle
  // stretch draws as a flat line at every zoom, and a change draws as a step). One pass over the
  // buckets in view, each written into the columns it covers: a redraw costs the buckets in view
  // plus the columns, whatever the zoom.
  var v0=view[0],v1=view[1],sc=cols/(v1-v0),LO=[],HI=[],LA=[];
  for(var k=0;k<ns;k++){LO.push(tl[SERIES[k][1]+'min']);HI.push(tl[SERIES[k][1]+'max']);LA.push(tl[SERIES[k][1]+'last']);}
  function cover(a,b,i,held){if(b<v0||a>v1)return;var x0=Math.max(0,Math.floor((a-v0)*sc)),x1=Math.min(cols-1,Math.max(x0,Math.floor((b-v0)*sc)));
   for(var k=0;k<ns;k++){var mn=held?LA[k][i]:LO[k][i],mx=held?LA[k][i]:HI[k][i],lo=pmin[k],hi=pmax[k];
    for(var x=x0;x<=x1;x++){if(!(lo[x]<=mn))lo[x]=mn;if(!(hi[x]>=mx))hi[x]=mx;}}}
  for(var i=Math.max(0,bucketAt(tl,v0));i<n&&tl.t[i]<=v1;i++){cover(tl.t[i],tl.te[i],i,false);if(i+1<n&&tl.t[i+1]>tl.te[i])cover(tl.te[i],tl.t[i+1],i,true);}
  // Columns wholly inside the exact points' span are drawn from them instead: each point's values
  // hold until the next point (Note [the timeline's exact points around the peak]).
  var xm=tl.xt.length,ex0=0,ex1=-1;
  if(xm>1&&tl.xt[0]<v1&&tl.xt[xm-1]>v0){ex0=Math.max(0,Math.ceil((tl.xt[0]-v0)*sc));ex1=Math.min(cols-1,Math.floor((tl.xt[xm-1]-v0)*sc)-1);}
  if(ex1>=ex0){for(var k=0;k<ns;k++){pmin[k].fill(NaN,ex0,ex1+1);pmax[k].fill(NaN,ex0,ex1+1);}
   var XV=SERIES.map(function(s){return tl['x'+s[1]];});
   for(var j=Math.max(0,exactAt(tl,Math.max(v0,tl.xt[0])));j+1<xm&&tl.xt[j]<=v1;j++){var a=tl.xt[j],b=tl.xt[j+1];if(b<v0)continue;
    var x0=Math.max(ex0,Math.floor((a-v0)*sc)),x1=Math.min(ex1,Math.max(x0,Math.floor((b-v0)*sc)));
    for(var k=0;k<ns;k++){var val=XV[k][j],lo=pmin[k],hi=pmax[k];for(var x=x0;x<=x1;x++){if(!(lo[x]<=val))lo[x]=val;if(!(hi[x]>=val))hi[x]=val;}}}}
  self.exactCols=ex1>=ex0?[ex0,ex1]:null;
  // Zoomed in below the width of a bucket (outside the exact points), the plot shows each
  // bucket's range, not the events: say so.
  var mid=(v0+v1)/2,bi=bucketAt(tl,mid),coarse=exactAt(tl,mid)<0&&bi>=0&&mid>=tl.t[bi]&&mid<=tl.te[bi]&&tl.te[bi]-tl.t[bi]>(v1-v0)/4;
  self.coarse=coarse?tl.te[bi]-tl.t[bi]:0;
  // The y axis fits what is in view (and the capacity when it is near), in one unit per axis.
  var top=0;for(var k=0;k<ns;k++){var a=pmax[k];for(var x=0;x<cols;x++)if(a[x]>top)top=a[x];}
  capIn=!!dev.capacity&&dev.capacity<=2.5*top;if(capIn)top=Math.max(top,dev.capacity);ymax=(top>0?top:1)*1.08;
  axes();
  // Each series' band (min..max of each column, at least a pixel high) as one filled outline per
  // run of drawn columns, and its line of maxima as one path: a few canvas calls per series
  // instead of one per column.
  SERIES.forEach(function(s,k){var lo=pmin[k],hi=pmax[k];ctx.fillStyle=COLORS[s[0]];ctx.globalAlpha=s[0]==='reserved'?0.35:0.55;ctx.beginPath();
   for(var x=0;x<cols;){if(isNaN(hi[x])){x++;continue;}var x0=x;while(x<cols&&!isNaN(hi[x]))x++;
    ctx.moveTo(ml+x0,Y(hi[x0]));for(var c=x0;c<x;c++){var y=Y(hi[c]);ctx.lineTo(ml+c,y);ctx.lineTo(ml+c+1,y);}
    for(var c=x-1;c>=x0;c--){var y=Math.max(Y(lo[c]),Y(hi[c])+1);ctx.lineTo(ml+c+1,y);ctx.lineTo(ml+c,y);}ctx.closePath();}
   ctx.fill();
   ctx.globalAlpha=1;ctx.strokeStyle=COLORS[s[0]];ctx.lineWidth=1.4;ctx.beginPath();var started=false;
   for(var x=0;x<cols;x++){if(isNaN(hi[x]))continue;var y=Y(hi[x]);if(!started){ctx.moveTo(ml+x,y);started=true;}else ctx.lineTo(ml+x,y);}ctx.stroke();});
  if(coarse){ctx.fillStyle='#5b6475';ctx.textAlign='left';ctx.fillText('finer than the timeline here: each band is the range within a bucket of '+fmtT(self.coarse)+(tl.xt.length?' (events are exact around the peak)':''),ml+6,H-mb-14);}
  if(dev.capacity&&!capIn){ctx.fillStyle=COLORS.cap;ctx.textAlign='right';ctx.fillText('capacity '+fmtB(dev.capacity)+' (above the scale)',W-mr-4,mt+12);}
  if(capIn){ctx.strokeStyle=COLORS.cap;ctx.setLineDash([6,4]);ctx.lineWidth=1.5;var yc=Y(dev.capacity);ctx.beginPath();ctx.moveTo(ml,yc);ctx.lineTo(W-mr,yc);ctx.stroke();ctx.setLineDash([]);
   ctx.fillStyle=COLORS.cap;ctx.textAlign='left';ctx.fillText('capacity '+fmtB(dev.capacity),ml+4,yc-4);}
  // Marks as ticks on the time axis; each OOM as a dashed line across the plot with a label (hover
  // for its diagnosis, click for its section); the peak of allocated memory as a dot.
  var shown={oom:0,peak:false};
  dev.markers.forEach(function(m){if(m.t<view[0]||m.t>view[1]||m.kind==='oom')return;var x=Math.round(X(m.t))+.5;
   ctx.strokeStyle='#7d8596';ctx.beginPath();ctx.moveTo(x,H-mb-8);ctx.lineTo(x,H-mb);ctx.stroke();});
  oomMarks.forEach(function(o){if(o.t<view[0]||o.t>view[1])return;var x=Math.round(X(o.t))+.5;shown.oom++;
   ctx.strokeStyle=COLORS.cap;ctx.lineWidth=1.5;ctx.setLineDash([4,3]);ctx.beginPath();ctx.moveTo(x,mt);ctx.lineTo(x,H-mb);ctx.stroke();ctx.setLineDash([]);
   ctx.fillStyle=COLORS.cap;ctx.beginPath();ctx.moveTo(x-6,mt);ctx.lineTo(x+6,mt);ctx.lineTo(x,mt+9);ctx.fill();
   ctx.font='bold 11px sans-serif';var right=x+40<W-mr;ctx.textAlign=right?'left':'right';ctx.fillText('OOM',right?x+8:x-8,mt+11);ctx.font='11px sans-serif';});
  if(peak&&peak.t>=view[0]&&peak.t<=view[1]){var px=X(peak.t),py=Y(peak.allocated);shown.peak=true;
   ctx.fillStyle=COLORS.allocated;ctx.strokeStyle='#fff';ctx.lineWidth=2;ctx.beginPath();ctx.arc(px,py,4.5,0,2*Math.PI);ctx.fill();ctx.stroke();
   var label='peak '+fmtB(peak.allocated),lw=ctx.measureText(label).width,right2=px+8+lw<W-mr;
   ctx.fillStyle='#1d2433';ctx.textAlign=right2?'left':'right';ctx.fillText(label,right2?px+8:px-8,Math.max(mt+12,py-6));}
  // The state shown below the plot (history.js): a line at its moment and one at the click.
  if(self.picked){var pk=self.picked;[[pk.clicked,'#9aa3b5',[2,3]],[pk.t,'#1d2433',[]]].forEach(function(p){if(p[0]<view[0]||p[0]>view[1])return;
   var x=Math.round(X(p[0]))+.5;ctx.strokeStyle=p[1];ctx.lineWidth=1.5;ctx.setLineDash(p[2]);ctx.beginPath();ctx.moveTo(x,mt);ctx.lineTo(x,H-mb);ctx.stroke();ctx.setLineDash([]);});}
  self.shown=shown;
  ctx.strokeStyle='#9aa3b5';ctx.strokeRect(ml+.5,mt+.5,W-ml-mr,H-mt-mb);
  if(sel){ctx.fillStyle='rgba(47,111,214,.12)';ctx.fillRect(Math.min(sel[0],sel[1]),mt,Math.abs(sel[1]-sel[0]),H-mt-mb);}
 }
 this.draw=draw;var drag=null;
 cv.addEventListener('mousedown',function(e){drag=[e.offsetX,e.offsetX];});
 cv.addEventListener('mousemove',function(e){var x=e.offsetX;if(drag){drag[1]=x;draw(drag);}
  if(x<ml||x>W-mr){tip.style.display='none';return;}var hit=markAt(x,e.offsetY);
  if(hit){placeTip(tip,hit.text,x,e.offsetY,W);cv.style.cursor=hit.oom?'pointer':'';return;}
  cv.style.cursor='';var t=T(x),v=valuesAt(dev,t);if(!v){tip.style.display='none';return;}
  var lines=['t = '+fmtT(t)];SERIES.concat([['requested','q']]).slice().reverse().forEach(function(s){var q=v[s[0]];
   lines.push(s[0]+': '+(q.min===q.max?fmtB(q.max):fmtB(q.min)+' .. '+fmtB(q.max)));});
  if(v.exact)lines.push('(exact: after the event at '+fmtT(v.t_begin)+(v.t_end>v.t_begin?', until '+fmtT(v.t_end):'')+')');
  else if(v.t_end>v.t_begin)lines.push((v.gap?'(no event from ':'(range ')+fmtT(v.t_begin)+' .. '+fmtT(v.t_end)+')');
  placeTip(tip,lines.join('\n'),x,e.offsetY,W);});
 cv.addEventListener('mouseleave',function(){tip.style.display='none';});
 window.addEventListener('mouseup',function(){if(!drag)return;var a=Math.min(drag[0],drag[1]),b=Math.max(drag[0],drag[1]);drag=null;
  if(b-a>4){var t0=Math.max(0,T(a)),t1=Math.min(tmax,T(b));if(t1-t0>minSpan)view=[t0,t1];}else{var hit=markAt(a,lastY);if(hit&&hit.oom&&hit.oom.oom&&self.onOom&&self.onOom(hit.oom)){}
   else if(hit&&hit.oom&&hit.oom.anchor){
   var target=document.getElementById(hit.oom.anchor);if(target)target.scrollIntoView({block:'start'});}
   else if(self.onPick&&a>=ml&&a<=W-mr)self.onPick(T(a));}draw();});
 var lastY=0;cv.addEventListener('mousedown',function(e){lastY=e.offsetY;});
 window.addEventListener('resize',function(){var w=width();if(w!==W||(window.devicePixelRatio||1)!==dpr){size();draw();}});
 this.xOf=function(t){return X(t);};this.yOf=function(v){return Y(v);};this.view=function(){return view.slice();};
 this.zoom=function(t0,t1){t0=Math.max(0,t0);t1=Math.min(tmax,t1);if(t1-t0>minSpan)view=[t0,t1];draw();return self.shown;};
 cv.addEventListener('dblclick',function(){view=[0,tmax];draw();});reset.addEventListener('click',function(){view=[0,tmax];draw();});
 draw();
}

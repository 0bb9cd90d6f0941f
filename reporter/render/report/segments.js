// The segment and block layout of one allocator state: a row per segment (address order, width by
// size), its blocks coloured by state. Only the rows in view are drawn: the canvas is the height of
// the visible window (at most 420 CSS pixels) and follows the scroll, so a state with hundreds of
// segments, and a page with one such state per rank and OOM, keeps its canvas memory bounded.
// `width`: the host's width when the caller knows it (a read of clientWidth after the caller's
// changes to the page would lay the page out again). `this.show(state)` draws another state on the
// same canvas: the state view of a clicked moment keeps one map, because a canvas's first drawing
// (its pixel buffer made) costs more than a redraw.
function Segments(state,host,width){
 var self=this,segs=[],maxs=1,H=0,VH=0,W=Math.max(600,Math.min(1400,(width||host.clientWidth||1300)-10)),lw=150,row=13,gap=3,VMAX=420,dpr=window.devicePixelRatio||1;
 // No horizontal scrollbar (the canvas leaves room for the vertical one), so the visible window
 // is VH high and the canvas, kept at the top of it, never reaches past the rows.
 W-=18;var none=el('div',{'class':'sub'},'no segments');
 var wrap=el('div',{'class':'plot',style:'max-height:'+VMAX+'px;overflow-y:auto;overflow-x:hidden'});
 var space=el('div',{style:'position:relative'});
 var cv=el('canvas',{'class':'segmap',style:'position:absolute;left:0;top:0;width:'+W+'px'});cv.width=Math.round(W*dpr);
 var tip=el('div',{'class':'tip'});
 space.appendChild(cv);space.appendChild(tip);wrap.appendChild(space);host.appendChild(none);host.appendChild(wrap);var ctx=cv.getContext('2d');
 var FILL=[COLORS.allocated,COLORS.pending,COLORS.free,COLORS.many];
 function draw(){if(!segs.length)return;var off=Math.max(0,Math.min(wrap.scrollTop,H-VH));cv.style.top=off+'px';ctx.setTransform(dpr,0,0,dpr,0,0);ctx.clearRect(0,0,W,VH);ctx.font='11px sans-serif';
  var r0=Math.max(0,Math.floor((off-2)/(row+gap))),r1=Math.min(segs.length-1,Math.ceil((off+VH)/(row+gap)));
  ctx.fillStyle='#5b6475';ctx.textAlign='right';
  for(var r=r0;r<=r1;r++){var s=segs[r];ctx.fillText(fmtB(s.size)+(s.expandable?' exp':'')+(s.large?'':' small'),lw-6,2+r*(row+gap)-off+row-2);}
  // The blocks of the rows in view as one path per state (and one for the rounding waste, drawn
  // over the allocated blocks), the outlines as one more: a few fills however many blocks. Free
  // memory first, allocated last, so that a block widened to a pixel hides free memory, not
  // allocated.
  [2,3,1,0].forEach(function(c){ctx.beginPath();
   for(var r=r0;r<=r1;r++){var s=segs[r],y=2+r*(row+gap)-off,w=(W-lw-10)*s.size/maxs,B=s.blocks;
    for(var j=0;j<B.length;j++){var b=B[j];if(b[2]===c)ctx.rect(lw+w*b[0]/s.size,y,Math.max(1,w*b[1]/s.size),row);}}
   ctx.fillStyle=FILL[c];ctx.fill();});
  ctx.beginPath();
  for(var r=r0;r<=r1;r++){var s=segs[r],y=2+r*(row+gap)-off,w=(W-lw-10)*s.size/maxs,B=s.blocks;
   for(var j=0;j<B.length;j++){var b=B[j];if(b[2]!==0||!(b[3]<b[1]))continue;var x=lw+w*b[0]/s.size,bw=Math.max(1,w*b[1]/s.size);
    if(bw>3){var ww=bw*(b[1]-b[3])/b[1];ctx.rect(x+bw-ww,y,Math.max(ww,0.5),row);}}}
  ctx.fillStyle=COLORS.waste;ctx.fill();
  ctx.beginPath();for(var r=r0;r<=r1;r++){var s=segs[r],y=2+r*(row+gap)-off,w=(W-lw-10)*s.size/maxs;ctx.rect(lw+.5,y+.5,Math.max(1,w-1),row-1);}
  ctx.strokeStyle='#7d8596';ctx.lineWidth=1;ctx.stroke();}
 wrap.addEventListener('scroll',function(){tip.style.display='none';draw();});
 cv.addEventListener('mousemove',function(e){var off=Math.max(0,Math.min(wrap.scrollTop,H-VH)),r=Math.floor((e.offsetY+off-2)/(row+gap));var s=segs[r];if(!s||e.offsetX<lw){tip.style.display='none';return;}
  var w=(W-lw-10)*s.size/maxs,o=(e.offsetX-lw)/w*s.size,hit=null;s.blocks.forEach(function(b){if(o>=b[0]&&o<b[0]+b[1])hit=b;});
  var st=['allocated','pending free (another stream)','free (cached)','many small blocks'];
  var lines=['segment '+s.addr+'  '+fmtB(s.size)];if(hit){lines.push('block +'+hit[0]+'  '+fmtB(hit[1])+'  '+st[hit[2]]);if(hit[2]<2)lines.push('requested '+fmtB(hit[3])+', rounding '+fmtB(hit[1]-hit[3]));}
  placeTip(tip,lines.join('\n'),e.offsetX,e.offsetY+off,W);});
 cv.addEventListener('mouseleave',function(){tip.style.display='none';});
 var lg=el('div',{'class':'legend sub'});[[COLORS.allocated,'allocated'],[COLORS.waste,'rounding waste'],[COLORS.pending,'pending free'],[COLORS.free,'free in the cache'],[COLORS.many,'many blocks']].forEach(function(p){
  var s=el('span');s.appendChild(el('i',{'class':'sw',style:'background:'+p[0]+';border:1px solid #9aa3b5'}));s.appendChild(document.createTextNode(p[1]));lg.appendChild(s);});host.appendChild(lg);
 var capped=el('div',{'class':'sub'});host.appendChild(capped);
 this.show=function(st){segs=st.segments;tip.style.display='none';var shown=segs.length>0;
  none.style.display=shown?'none':'';wrap.style.display=shown?'':'none';lg.style.display=shown?'':'none';
  capped.textContent=st.segments_total>segs.length?'the '+segs.length+' largest of '+st.segments_total+' segments are drawn':'';capped.style.display=capped.textContent?'':'none';
  if(!shown)return;maxs=0;segs.forEach(function(s){maxs=Math.max(maxs,s.size);});
  H=segs.length*(row+gap)+4;VH=Math.min(H,VMAX);space.style.height=H+'px';
  // A new height clears the canvas's buffer: only when the number of rows in view changes.
  var ph=Math.round(VH*dpr);if(cv.height!==ph){cv.height=ph;cv.style.height=VH+'px';}
  wrap.scrollTop=0;draw();};
 this.canvas=cv;
 this.show(state);
}

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

// Note [the icicle at the peak] in report_html.cpp: the bytes allocated at the peak by call stack,
// outermost callers on top, each frame as wide as its bytes under its caller. Hover a frame for
// its label, bytes and share; click it to give it the whole width (its callers stay above it);
// click the top row or double-click to go back.
function Icicle(ic,S,host){
 var self=this,n=ic.b.length,kids=[],roots=[],depth=[],maxd=0,row=17;
 for(var i=0;i<n;i++)kids.push([]);
 for(var i=0;i<n;i++){if(ic.p[i]<0){roots.push(i);depth.push(1);}else{kids[ic.p[i]].push(i);depth.push(depth[ic.p[i]]+1);}maxd=Math.max(maxd,depth[i]);}
 var W=Math.max(600,Math.min(1400,(host.clientWidth||1300)-10)),H=(maxd+1)*row+2,dpr=window.devicePixelRatio||1;
 var wrap=el('div',{'class':'plot'}),cv=el('canvas',{'class':'icicle',width:Math.round(W*dpr),height:Math.round(H*dpr),style:'width:'+W+'px;height:'+H+'px'}),tip=el('div',{'class':'tip'});
 wrap.appendChild(cv);wrap.appendChild(tip);host.appendChild(wrap);this.canvas=cv;var ctx=cv.getContext('2d');
 var focus=-1,rects=[];this.rects=rects;
 function bytesOf(i){return i<0?ic.total:ic.b[i];}
 function labelOf(i){return i<0?'all stacks at the peak':S.frames[ic.f[i]][0];}
 function kindOf(i){return i<0?'':S.frames[ic.f[i]][1];}
 function path(i){var p=[];while(i>=0){p.unshift(i);i=ic.p[i];}return p;}
 function box(i,x,y,w){rects.push({node:i,x:x,y:y,w:w,h:row-1});}
 function layout(){rects.length=0;box(-1,0,0,W);var p=path(focus);
  p.forEach(function(i){box(i,0,depth[i]*row,W);});
  function below(list,x,w,total){list.forEach(function(i){var bw=w*ic.b[i]/total;if(bw>=0.5){box(i,x,depth[i]*row,bw);below(kids[i],x,bw,ic.b[i]);}x+=bw;});}
  below(focus<0?roots:kids[focus],0,W,bytesOf(focus));}
 function fill(r){var k=kindOf(r.node);if(r.node<0)return '#c9ced8';
  var h=0,l=labelOf(r.node);for(var j=0;j<l.length;j++)h=(h*31+l.charCodeAt(j))|0;var shade=(h>>>0)%3;
  return k==='user'?['#E69F00','#f0b43a','#d18f00'][shade]:['#56B4E9','#7cc4ee','#3fa3db'][shade];}
 function draw(){layout();ctx.setTransform(dpr,0,0,dpr,0,0);ctx.clearRect(0,0,W,H);ctx.font='11px sans-serif';ctx.textAlign='left';
  rects.forEach(function(r){ctx.fillStyle=fill(r);ctx.fillRect(r.x,r.y,Math.max(0.5,r.w-0.5),r.h);
   if(r.w>30){ctx.save();ctx.beginPath();ctx.rect(r.x,r.y,r.w-2,r.h);ctx.clip();ctx.fillStyle='#1d2330';ctx.fillText(labelOf(r.node),r.x+3,r.y+12);ctx.restore();}});}
 function hit(x,y){for(var k=rects.length-1;k>=0;k--){var r=rects[k];if(x>=r.x&&x<r.x+r.w&&y>=r.y&&y<r.y+r.h)return r;}return null;}
 this.text=function(i){var b=bytesOf(i);return labelOf(i)+'\n'+fmtB(b)+' ('+(100*b/ic.total).toFixed(1)+'% of the '+fmtB(ic.total)+' allocated at the peak with a recorded stack)'+(kindOf(i)?'\n'+kindOf(i)+' frame':'');};
 cv.addEventListener('mousemove',function(e){var r=hit(e.offsetX,e.offsetY);if(!r){tip.style.display='none';return;}placeTip(tip,self.text(r.node),e.offsetX,e.offsetY,W);});
 cv.addEventListener('mouseleave',function(){tip.style.display='none';});
 cv.addEventListener('click',function(e){var r=hit(e.offsetX,e.offsetY);if(!r)return;focus=r.node===focus&&r.node>=0?ic.p[r.node]:r.node;draw();});
 cv.addEventListener('dblclick',function(){focus=-1;draw();});
 this.focus=function(){return focus;};
 draw();
 if(ic.left_out)host.appendChild(el('div',{'class':'sub'},(ic.left_out)+' smaller frames are counted in their callers only (the page keeps frames of at least 1/1000 of the bytes)'));
}
var icicles=[];

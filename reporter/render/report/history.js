// The allocator's state at a clicked moment (Note [checkpoints of the state] in
// model/trace_model.h): the page keeps a device's state at a bounded set of moments (its
// checkpoints, the peak, each OOM, the end). A click on the memory chart shows the last of them
// at or before the clicked time, with its exact time, its figures, its segment map and its
// biggest allocations; the chart marks both times.
function stateMoments(dev){var m=[],prev={};
 // A segment written {addr, same} is the one at its address in the checkpoint before.
 (dev.checkpoints||[]).forEach(function(s){var cur={};s.segments=s.segments.map(function(g){var x=g.same?prev[g.addr]:g;cur[x.addr]=x;return x;});prev=cur;
  m.push({s:s,what:s.end?'the end':'checkpoint'});});
 if(dev.peak&&dev.peak.segments)m.push({s:dev.peak,what:'the peak of allocated memory'});
 dev.ooms.forEach(function(o,i){if(o.state&&o.state.segments)m.push({s:o.state,what:o.last_state?'the last state':'OOM '+(i+1),oom:o});});
 m.sort(function(a,b){return a.s.t-b.s.t||a.s.event-b.s.event;});return m;}
// The last moment at or before t (ms); the first one when t comes before them all.
function momentAt(moments,t){var k=0;for(var i=0;i<moments.length;i++)if(moments[i].s.t<=t)k=i;return k;}
function checkpointNote(dev,n){var k=dev.checkpoints_every||1,taken=dev.checkpoints_taken||0;
 if(!taken)return n+' moments (the peak and the OOMs: a report of more than 8 traces takes no checkpoints)';
 if(!(dev.checkpoints||[]).length)return n+' moments (the peak and the OOMs: this device\u2019s checkpoints are too large for the page)';
 return n+' moments'+(k>1?' (one checkpoint in '+k+' of '+taken+', to keep the page small)':'');}
function StateView(dev,host,tln,S){var moments=stateMoments(dev),self=this;this.moments=moments;this.shown=null;
 host.appendChild(el('h3',null,'Allocator state at a clicked moment'));
 var head=el('div',{'class':'sub'}),body=el('div',{'class':'stateview'});host.appendChild(head);host.appendChild(body);
 // The segment map's width, read once here: a click then lays the page out once, after its changes.
 var width=body.clientWidth;
 if(!moments.length){head.textContent='no state of this device is in the page';return;}
 head.textContent='Click the chart above to see the state then: the page keeps it at '+checkpointNote(dev,moments.length)+', spread over the run, and shows the nearest before the click.';
 // Built on the first click and kept: a click replaces the texts and tables and redraws the same
 // segment map (its canvas made once; see Segments).
 var parts=null;
 // `k`: the moment to show (an OOM clicked on the chart), else the last at or before t.
 this.show=function(t,k){var picked=k!==undefined;if(!picked)k=momentAt(moments,t);var m=moments[k],s=m.s;
  self.shown={t:s.t,event:s.event,clicked:t,what:m.what,index:k,allocated:s.allocated,reserved:s.reserved};
  tln.picked={t:s.t,clicked:t};tln.draw();
  if(!parts){parts={head:el('div',{'class':'diag statehead'}),jump:el('div',{'class':'sub'}),figures:el('div'),map:el('div'),big:el('div')};
   // The OOM's own section (its diagnosis, sites and replays) stays one click away.
   parts.link=el('a',{href:'#'},'');parts.jump.appendChild(parts.link);
   parts.link.addEventListener('click',function(e){e.preventDefault();var a=parts.link.getAttribute('data-anchor'),target=a&&document.getElementById(a);if(target)target.scrollIntoView({block:'start'});});
   [parts.head,parts.jump,parts.figures,parts.map,el('h3',null,'The biggest allocations alive then'),parts.big].forEach(function(e){body.appendChild(e);});}
  var how=picked?'the OOM clicked on the chart':(s.t<=t?'the checkpoint nearest before':'the first checkpoint, after')+' the click at +'+fmtT(t);
  parts.head.textContent='State at +'+fmtT(s.t)+' (event '+s.event+', '+m.what+'), '+how;
  var anchor=m.oom&&m.oom.anchor;parts.jump.style.display=anchor?'':'none';
  if(anchor){parts.link.setAttribute('data-anchor',anchor);parts.link.setAttribute('href','#'+anchor);parts.link.textContent='go to '+m.what+': its diagnosis and next step';}
  parts.figures.textContent='';stateFigures(parts.figures,s);
  if(parts.segments)parts.segments.show(s);else parts.segments=new Segments(s,parts.map,width);
  parts.big.textContent='';biggest(parts.big,s.biggest,S);};
 tln.onPick=function(t){self.show(t);};
 // A click on an OOM marker: the state at that OOM, when the page has it.
 tln.onOom=function(mark){for(var k=0;k<moments.length;k++)if(moments[k].oom&&moments[k].oom===mark.oom){self.show(mark.t,k);return true;}return false;};}
var stateViews=[];

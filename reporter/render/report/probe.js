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
probe.marks=timelines.map(function(tl){return tl.shown;});
// For the browser tests: the page's own functions, read through the DevTools protocol.
window.vtPage={timelines:timelines,valuesAt:valuesAt,data:DATA,colors:COLORS,process_colors:PCOL,stateViews:stateViews,icicles:icicles,stacks:stacks};
probe.segment_canvases=[].map.call(document.querySelectorAll('canvas.segmap'),function(c){return [c.width,c.height];});
document.getElementById('vt-probe').textContent=JSON.stringify(probe);

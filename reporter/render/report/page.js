document.getElementById('title').textContent=DATA.title;document.title=DATA.title;
document.getElementById('subtitle').textContent=DATA.generated_by;legend();
(DATA.unfinished||[]).forEach(function(u){main.appendChild(el('div',{'class':'note warn unfinished'},u));});
if(DATA.verdicts)verdictSection(DATA.verdicts);
// Note [devices in the page] (report_html.cpp): the devices left without their section or detail.
var LO=DATA.devices_left_out;
if(LO&&LO.rows){var bare=LO.count-LO.rows;main.appendChild(el('div',{'class':'note warn',id:'devices-left-out'},LO.drawn+' of '+LO.of+' devices are drawn with a section of their own'+
 (bare?' ('+bare+' of them by their figures and timeline only, without their layouts, tables and states)':'')+'; the other '+LO.rows+' are rows of the table \u201cOther devices\u201d only'+
 (DATA.processes?', with their memory over time in the stacked chart of their device':'')+', and their marks'+(LO.marks_left_out?' ('+LO.marks_left_out+')':'')+' are not in this page. Devices with an OOM come first, then the highest peak reserved. vramtrace summary TRACE and vramtrace oom TRACE give the rest of a device.'));}
else if(LO)main.appendChild(el('div',{'class':'note warn',id:'devices-left-out'},LO.count+' of '+LO.of+' devices are shown by their figures and timeline only: their layouts, tables and states are left out to keep the page small (devices with an OOM first, then the highest peak reserved, keep theirs). vramtrace summary and vramtrace oom on a trace give the rest.'));
if(DATA.processes)processSection(DATA.processes);
if(DATA.other_devices)otherDevices(DATA.other_devices);
DATA.traces.forEach(function(tr,ti){
 main.appendChild(el('h2',null,tr.path+(tr.workload?'  ('+tr.workload+')':'')));
 var info=[tr.format+' trace',tr.events+' events'];if(tr.incomplete)info.push('ends abruptly');main.appendChild(el('div',{'class':'sub'},info.join(', ')));
 main.appendChild(el('div',{'class':'sub'},'settings: '+(tr.settings||'(defaults)')));
 if(tr.lost_warning)main.appendChild(el('div',{'class':'note warn'},tr.lost_warning));
 tr.notes.forEach(function(n){main.appendChild(el('div',{'class':'note'},n));});var S=tr.stacks;
 if(S&&S.stacks_left_out)main.appendChild(el('div',{'class':'note'},S.stacks_left_out+' call stacks are not in this page, which keeps the first '+S.max_stacks+' distinct stacks of a trace (vramtrace summary --json has each site\u2019s stack)'));
 tr.devices.forEach(function(dev){
  main.appendChild(el('h3',null,'Device '+dev.device+': memory over time ('+fmtT(dev.duration_ms)+')'));
  var cases=0;dev.ooms.forEach(function(o,i){if(!o.last_state)o.anchor='oom-'+ti+'-'+dev.device+'-'+(++cases);});
  var h=el('div');main.appendChild(h);var tln=new Timeline(dev,h);timelines.push(tln);
  dev.notes.forEach(function(n){main.appendChild(el('div',{'class':'note'},n));});
  var sv=el('div');main.appendChild(sv);stateViews.push(new StateView(dev,sv,tln,S));
  if(dev.peak){main.appendChild(el('h3',null,'Allocator state at the peak of allocated memory'));stateFigures(main,dev.peak);var sh=el('div');main.appendChild(sh);new Segments(dev.peak,sh);
   main.appendChild(el('h3',null,'The biggest allocations alive at the peak'));biggest(main,dev.peak.biggest,S);sites(main,'Top allocation sites at the peak',dev.peak.sites,S);
   if(dev.peak.icicle&&S){main.appendChild(el('h3',null,'Bytes allocated at the peak by call stack (outermost caller on top)'));
    main.appendChild(el('div',{'class':'sub'},'hover a frame for its bytes; click to zoom into it, double-click to go back'));var ih=el('div');main.appendChild(ih);icicles.push(new Icicle(dev.peak.icicle,S,ih));}}
  if(dev.oom_count)main.appendChild(el('div',{'class':'sub'},dev.oom_count));
  dev.ooms.forEach(function(o,i){var head=o.last_state?'Last state (the trace ends abruptly)':'OOM '+(i+1);
   main.appendChild(el('h3',o.anchor?{id:o.anchor}:null,o.state?head+' at '+fmtT(o.state.t):head+': not in the history (known from '+o.without_entry+')'));
   if(!o.state)main.appendChild(el('div',{'class':'note'},'Its moment and the allocator\u2019s state at it were not recorded.'+(o.message?' Message: '+o.message:'')));
   main.appendChild(el('div',{'class':'diag'},'Diagnosis: '+o.diagnosis+' \u2014 '+o.headline));o.reasons.forEach(function(r){main.appendChild(el('div',{'class':'sub'},'because '+r));});
   if(o.next_step)main.appendChild(el('div',null,'Next step: '+o.next_step));if(o.request!==null)main.appendChild(el('div',null,'request '+fmtB(o.request)+', free on the device '+fmtB(o.device_free)));
   if(o.state){stateFigures(main,o.state);var oh=el('div');main.appendChild(oh);new Segments(o.state,oh);
    main.appendChild(el('h3',null,'The biggest allocations alive at this moment'));biggest(main,o.state.biggest,S);}
   sites(main,'Top allocation sites alive at this moment',o.sites,S);});
  if(dev.detail===false){main.appendChild(el('div',{'class':'note left-out'},'peak allocated '+fmtB(dev.peak_allocated)+', peak reserved '+fmtB(dev.peak_reserved)+(dev.capacity!==null?', capacity '+fmtB(dev.capacity):'')+'. Its layouts, tables and states are not in this page: vramtrace summary '+tr.path+' and vramtrace oom '+tr.path+' give them.'));return;}
  main.appendChild(el('h3',null,'Summary (torch.cuda.memory_summary layout)'));main.appendChild(el('pre',null,dev.summary_table));
  main.appendChild(el('h3',null,'Still allocated at the end: '+dev.end.live_blocks+' blocks, '+fmtB(dev.end.live_bytes)));biggest(main,dev.end.biggest,S);
  sites(main,'Top allocation sites at the end',dev.end.sites,S);
 });
 if(tr.ledger)ledgerSection(main,tr.ledger);
});

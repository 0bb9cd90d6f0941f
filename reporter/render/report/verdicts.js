// The first screen: each OOM's diagnosis and the allocator settings' verdicts, as `vramtrace oom`
// gives them (render/report_verdicts.h). V: DATA.verdicts.
function verdictSection(V){var box=el('div',{id:'verdicts','class':'verdicts'});main.appendChild(box);
 box.appendChild(el('h2',null,'Out of memory: why, and which allocator settings fit'));
 V.traces.forEach(function(v){if(V.traces.length>1||DATA.traces.length>1)box.appendChild(el('h3',null,v.path));
  v.cases.forEach(function(c){box.appendChild(el('div',{'class':'diag'},'OOM '+c.n+' on device '+c.device+': '+c.diagnosis+' \u2014 '+c.headline));
   if(c.next_step)box.appendChild(el('div',{'class':'sub'},'Next step: '+c.next_step));});
  var w=v.whatif;if(v.replay_error)box.appendChild(el('div',{'class':'note warn'},'No replays: '+v.replay_error));if(!w)return;
  if(w.withheld)box.appendChild(el('div',{'class':'note warn withheld'},'No verdict on any setting: '+w.withheld.why+'.'+(w.withheld.how?' To get one: '+w.withheld.how+'.':'')));
  else if(w.partial)box.appendChild(el('div',{'class':'note partial'},'Part of the run: '+w.partial.why+'. A setting that runs out of memory before that point does not fit; one that gets through it has no verdict.'+(w.partial.how?' To judge the whole run: '+w.partial.how+'.':'')));
  w.warnings.forEach(function(x){box.appendChild(el('div',{'class':'note warn'},x));});
  if(w.rows.some(function(r){return r.peak_reserved_bytes!==null;}))box.appendChild(el('div',{'class':'sub'},'replayed on '+fmtB(w.capacity_bytes)+' ('+w.capacity_source+'); error bound: '+w.bound_source));
  var t=table(box,['settings','verdict','spare / short','peak reserved','allowed'],w.rows.map(function(r){
   var spare=r.margin_bytes!==null?fmtB(r.margin_bytes):r.shortfall_bytes!==null?'short '+fmtB(r.shortfall_bytes):r.ooms?r.ooms+' OOM'+(r.ooms>1?'s':''):'-';
   var verdict=r.verdict===null?(r.error?'failed':'no verdict'):r.verdict.replace(/_/g,' ');
   return [r.settings||'(trace\u2019s own)',verdict,spare,r.peak_reserved_bytes===null?'-':fmtB(r.peak_reserved_bytes),r.allowed_bytes===null?'-':fmtB(r.allowed_bytes)];}));t.className='verdict-table';
  w.rows.forEach(function(r,i){var row=t.rows[i+1];row.setAttribute('data-verdict',r.verdict===null?'none':r.verdict);
   if(r.withheld&&!w.withheld&&!w.partial)row.title=r.withheld+(r.how_to_get_a_verdict?'; '+r.how_to_get_a_verdict:'');});
  if(v.tune_command){var d=el('div',null,'To check these on the real program, under the same cap: ');d.appendChild(el('code',null,v.tune_command));box.appendChild(d);}});
 if(V.more)box.appendChild(el('div',{'class':'note'},V.more+' more traces ran out of memory: vramtrace oom TRACE gives each its verdicts.'));}

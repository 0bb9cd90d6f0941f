// The memory ledger of a PyTorch process (docs/reports.md, "The memory ledger"): per device, its
// rows at the end, the peak and each OOM, one column per moment; "unknown" where a row is.
function ledgerSection(host,lg){host.appendChild(el('h3',null,'Memory ledger: '+lg.levels));
 lg.devices.forEach(function(d){
  var names=d.moments.map(function(m){return m.moment==='oom'?'OOM '+(m.oom+1):'at the '+m.moment;});
  var row=function(name,f){return [name].concat(d.moments.map(function(m){var x=f(m);return x===null||x===undefined?'unknown':fmtB(x);}));};
  var kind=function(k){return function(m){return m.outside_by_kind?m.outside_by_kind[k]:null;};};
  table(host,['device '+d.device].concat(names),[
   row('PyTorch\'s tensors (allocated)',function(m){return m.allocated_bytes;}),
   row('  active',function(m){return m.active_bytes;}),row('  requested',function(m){return m.requested_bytes;}),
   row('PyTorch\'s cache (reserved - allocated)',function(m){return m.cache_bytes;}),
   row('= PyTorch reserved',function(m){return m.reserved_bytes;}),
   row('+ outside PyTorch\'s allocator',function(m){return m.outside_bytes;}),
   row('  device (cudaMalloc)',kind('device')),row('  pitched',kind('pitched')),row('  pool',kind('pool')),
   row('  virtual memory',kind('virtual_memory')),
   row('+ vramtrace\'s blocks beyond PyTorch\'s segments',function(m){return m.rounding_bytes;}),
   row('+ rest: CUDA context, driver, other processes',function(m){return m.rest_bytes;}),
   row('  the context when vramtrace met it',function(m){return m.context_bytes;}),
   row('= used (total - free)',function(m){return m.used_bytes;}),
   row('free',function(m){return m.free_bytes;}),row('total',function(m){return m.total_bytes;})]);
  d.moments.forEach(function(m,i){m.notes.forEach(function(n){host.appendChild(el('div',{'class':'note'},'device '+d.device+', '+names[i]+': '+n));});});
 });
 lg.notes.forEach(function(n){host.appendChild(el('div',{'class':'note'},n));});}

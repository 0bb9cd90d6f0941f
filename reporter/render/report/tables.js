function table(host,head,rows){var t=el('table'),tr=el('tr');head.forEach(function(h,i){tr.appendChild(el('th',i?null:{'class':'l'},h));});t.appendChild(tr);
 rows.forEach(function(r){var tr=el('tr');r.forEach(function(c,i){tr.appendChild(el('td',i?null:{'class':'l'},c));});t.appendChild(tr);});host.appendChild(t);return t;}
function stateFigures(host,s){table(host,['at '+fmtT(s.t)+' (event '+s.event+')','bytes'],[['allocated',fmtB(s.allocated)],['active',fmtB(s.active)],['requested',fmtB(s.requested)],['reserved',fmtB(s.reserved)],
 ['reserved but unallocated',fmtB(s.reserved-s.allocated)],['inactive split (non-releasable)',fmtB(s.inactive_split)],['rounding waste',fmtB(s.allocated-s.requested)],['largest free block in the cache',fmtB(s.largest_free)]]);}
// The biggest allocations; with stacks (S: the trace's stacks) a site column, and each row's stack on hover.
function biggest(host,list,S){var withSite=S&&list.some(function(b){return b.stack!==undefined;});
 var head=['#','size','requested','stream','allocated at','address'];if(withSite)head.push('site (hover for the stack)');
 var t=table(host,head,list.map(function(b,i){var r=[String(i+1),fmtB(b.size),fmtB(b.requested),String(b.stream),(b.before_trace?'before the history':fmtT(b.t))+(b.pending?' (pending free)':''),b.addr];
  if(withSite)r.push(b.site||'(no stack recorded)');return r;}));
 if(withSite){t.className='biggest';list.forEach(function(b,i){var row=t.rows[i+1];row.cells[row.cells.length-1].className='l';
  if(b.stack!==undefined)withStack(row,S,b.stack,fmtB(b.size)+' at '+b.addr+': the call stack of its allocation');});t.rows[0].cells[head.length-1].className='l';}}
function sites(host,title,list,S){if(!list||!list.length)return;host.appendChild(el('h3',null,title));
 if(S)host.appendChild(el('div',{'class':'sub'},'hover, focus or tap a site for its call stack'));
 var t=table(host,['site (the user\'s line)','bytes','blocks','framework line below it'],list.map(function(x){return [x.site,fmtB(x.bytes),String(x.blocks),x.via];}));t.className='sites';
 if(S)list.forEach(function(x,i){withStack(t.rows[i+1],S,x.stack,x.site+': '+fmtB(x.bytes)+' in '+x.blocks+' blocks; the stack holding the most of them'+(x.stacks>1?' (1 of '+x.stacks+' stacks)':''));});}

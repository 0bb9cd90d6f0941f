function table(host,head,rows){var t=el('table'),tr=el('tr');head.forEach(function(h,i){tr.appendChild(el('th',i?null:{'class':'l'},h));});t.appendChild(tr);
 rows.forEach(function(r){var tr=el('tr');r.forEach(function(c,i){tr.appendChild(el('td',i?null:{'class':'l'},c));});t.appendChild(tr);});host.appendChild(t);}
function stateFigures(host,s){table(host,['at '+fmtT(s.t)+' (event '+s.event+')','bytes'],[['allocated',fmtB(s.allocated)],['active',fmtB(s.active)],['requested',fmtB(s.requested)],['reserved',fmtB(s.reserved)],
 ['reserved but unallocated',fmtB(s.reserved-s.allocated)],['inactive split (non-releasable)',fmtB(s.inactive_split)],['rounding waste',fmtB(s.allocated-s.requested)],['largest free block in the cache',fmtB(s.largest_free)]]);}
function biggest(host,list){table(host,['#','size','requested','stream','allocated at','address'],list.map(function(b,i){return [String(i+1),fmtB(b.size),fmtB(b.requested),String(b.stream),fmtT(b.t)+(b.pending?' (pending free)':''),b.addr];}));}
function sites(host,title,list){if(!list||!list.length)return;host.appendChild(el('h3',null,title));
 table(host,['site (the user\'s line)','bytes','blocks','framework line below it'],list.map(function(x){return [x.site,fmtB(x.bytes),String(x.blocks),x.via];}));}

// Call stacks on hover, focus and click (Note [stacks in the page] in report_html.cpp): a row of a
// sites or allocations table names an entry of its trace's stacks.list; one shared box shows its
// frames, innermost first, the user's line marked. A click (or a tap, Enter, Space) pins the box
// until the next click or Escape; without a pin it follows the mouse and the keyboard focus.
var stackTip=null,stackPinned=null,stackShownFor=null;
function stackTipEl(){if(!stackTip){stackTip=el('div',{'class':'stacktip',id:'vt-stack',role:'tooltip'});stackTip.style.display='none';document.body.appendChild(stackTip);}return stackTip;}
function fillStack(tip,S,ref,head){tip.textContent='';tip.appendChild(el('div',{'class':'sh'},head));
 var st=S&&ref!==null&&ref!==undefined?S.list[ref]:null;
 if(!st){tip.appendChild(el('div',{'class':'fr gap'},'stack not in this page: it keeps the first '+(S?S.max_stacks:0)+' distinct stacks of a trace'));return;}
 tip.appendChild(el('div',{'class':'sub'},st.n+' frames, innermost first; \u25B6 the user\u2019s line'));
 st.f.forEach(function(x,i){
  if(x<0){tip.appendChild(el('div',{'class':'fr gap'},'  \u2026 '+(-x)+' frames left out (the page keeps '+S.max_frames+' of a stack)'));return;}
  var fr=S.frames[x],u=i===st.u;tip.appendChild(el('div',{'class':'fr k-'+fr[1]+(u?' user':'')+(i===st.v?' via':'')},(u?'\u25B6 ':'  ')+fr[0]));});}
function showStack(row){var t=stackTipEl();fillStack(t,row.vtStacks,row.vtRef,row.vtHead);t.style.display='block';
 var r=row.getBoundingClientRect();t.style.left=(window.scrollX+r.left+24)+'px';t.style.top=(window.scrollY+r.bottom+2)+'px';
 if(stackShownFor&&stackShownFor!==row)stackShownFor.removeAttribute('aria-describedby');row.setAttribute('aria-describedby','vt-stack');stackShownFor=row;}
function hideStack(){if(stackTip)stackTip.style.display='none';if(stackShownFor)stackShownFor.removeAttribute('aria-describedby');stackShownFor=null;}
function withStack(row,S,ref,head){row.vtStacks=S;row.vtRef=ref;row.vtHead=head;row.setAttribute('tabindex','0');row.classList.add('hasstack');
 row.addEventListener('mouseenter',function(){if(!stackPinned)showStack(row);});
 row.addEventListener('mouseleave',function(){if(!stackPinned)hideStack();});
 row.addEventListener('focus',function(){if(!stackPinned)showStack(row);});
 row.addEventListener('blur',function(){if(!stackPinned)hideStack();});
 row.addEventListener('click',function(e){e.stopPropagation();if(stackPinned===row){stackPinned=null;hideStack();}else{stackPinned=row;showStack(row);}});
 row.addEventListener('keydown',function(e){if(e.key==='Enter'||e.key===' '){e.preventDefault();row.click();}});}
document.addEventListener('keydown',function(e){if(e.key==='Escape'){stackPinned=null;hideStack();}});
document.addEventListener('click',function(e){if(stackPinned&&!(stackTip&&stackTip.contains(e.target))){stackPinned=null;hideStack();}});

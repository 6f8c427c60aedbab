(function () {
  "use strict";
  var d = document;
  // Tells a reader (and the tests) that the page's own script ran under
  // its Content-Security-Policy.
  d.documentElement.setAttribute("data-cs-ready", "1");

  // A click on a call's lane (or Enter on it) opens that call's details.
  function show(target) {
    var g = target && target.closest ? target.closest("[data-cs-call]") : null;
    if (!g) return;
    var det = d.getElementById(g.getAttribute("data-cs-call"));
    if (!det) return;
    det.open = true;
    det.scrollIntoView({block: "nearest"});
  }
  d.addEventListener("click", function (e) { show(e.target); });
  d.addEventListener("keydown", function (e) { if (e.key === "Enter") show(e.target); });

  // Live updates. While the session runs the server appends, for each
  // changed element, a template element (attribute data-cs-swap naming the
  // element's id) holding its new version, then an empty marker element
  // (attribute data-cs-done): the marker's arrival means the template
  // before it is complete.
  // The element with that id is replaced (details left open stay open); a
  // turn the page does not have yet is added at the end.
  function swap(t) {
    var id = t.getAttribute("data-cs-swap");
    var next = t.content.firstElementChild;
    if (!next) return;
    var old = d.getElementById(id);
    if (old) {
      var open = old.querySelectorAll("details[open]");
      for (var i = 0; i < open.length; i++) {
        var same = t.content.getElementById(open[i].id);
        if (same) same.open = true;
      }
      old.replaceWith(next);
    } else if (id.indexOf("cs-turn-") === 0) {
      d.getElementById("cs-turns").appendChild(next);
    }
  }
  function apply() {
    var done = d.querySelectorAll("i[data-cs-done]");
    for (var i = 0; i < done.length; i++) {
      var t = done[i].previousElementSibling;
      if (t && t.tagName === "TEMPLATE" && t.hasAttribute("data-cs-swap")) {
        swap(t);
        t.remove();
      }
      done[i].remove();
    }
  }
  new MutationObserver(apply).observe(d.body, {childList: true});
  apply();
})();

// eosim index.html: the claims matrix filters and the history search (no libraries).
(function () {
  "use strict";
  var verdict = document.getElementById("f-verdict");
  var pipeline = document.getElementById("f-pipeline");
  var text = document.getElementById("f-text");
  var count = document.getElementById("f-count");
  var rows = Array.prototype.slice.call(document.querySelectorAll("#matrix tr.scenario-row"));

  function filterMatrix() {
    var v = verdict.value, p = pipeline.value, q = text.value.trim().toLowerCase();
    var shown = 0;
    rows.forEach(function (row) {
      var ok = (!v || row.dataset.verdict === v) &&
        (!p || row.dataset.pipeline === p) &&
        (!q || row.textContent.toLowerCase().indexOf(q) >= 0);
      row.hidden = !ok;
      if (ok) { shown += 1; }
    });
    count.textContent = "showing " + shown + " of " + rows.length + " scenarios";
  }
  [verdict, pipeline].forEach(function (el) { el.addEventListener("change", filterMatrix); });
  text.addEventListener("input", filterMatrix);
  filterMatrix();

  Array.prototype.forEach.call(document.querySelectorAll("input.history-filter"), function (input) {
    var table = document.getElementById(input.dataset.table);
    var out = input.parentNode.querySelector(".history-count");
    var ops = Array.prototype.slice.call(table.tBodies[0].rows);
    function filterHistory() {
      var q = input.value.trim().toLowerCase(), shown = 0;
      ops.forEach(function (row) {
        var ok = !q || row.textContent.toLowerCase().indexOf(q) >= 0;
        row.hidden = !ok;
        if (ok) { shown += 1; }
      });
      out.textContent = q ? shown + " matching" : "";
    }
    input.addEventListener("input", filterHistory);
  });
  document.body.dataset.ready = "1";
}());

// The diagnosis tables as Markdown (`gradsleuth checks --causes`, docs/checks.md): the symptoms with their
// candidate causes, and the causes with the checks and probes that confirm them.
#include <algorithm>
#include <sstream>

#include "debug/diagnosis/diagnosis.h"

namespace gradsleuth::debug {

std::string diagnosis_tables_markdown() {
  std::ostringstream os;
  os << "| symptom | shown by | candidate causes, most likely first |\n|---|---|---|\n";
  for (const Symptom& s : diagnosis_symptoms()) {
    os << "| " << s.name << " | " << s.shown_by << " | ";
    for (size_t i = 0; i < s.causes.size(); ++i) {
      const Cause* c = find_cause(s.causes[i]);
      // A check that confirms two causes (O6: too high, too low) is named with the cause.
      const bool shared = std::count_if(diagnosis_causes().begin(), diagnosis_causes().end(),
                                        [&](const Cause& k) { return k.fault && k.check == c->check; }) > 1;
      os << (i ? ", " : "") << (!c->fault ? "(" + c->name + ")" : shared ? c->check + " (" + c->name + ")" : c->check);
    }
    os << " |\n";
  }
  os << "\n| cause | confirmed by | the probe measures |\n|---|---|---|\n";
  for (const Cause& c : diagnosis_causes())
    if (c.fault)
      os << "| " << c.name << " | " << c.check << (c.id == "nonfinite-op" ? ", W4" : "") << " | " << c.probe << " |\n";
  return os.str();
}

}  // namespace gradsleuth::debug

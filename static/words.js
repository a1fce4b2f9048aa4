// The permission engine's reasons in a person's words. The server writes, for the model and the
// audit record, "approval required by the default rule bash: *"; the screens say whose rule it
// is ("Totem's built-in rule", "your rule for this project") and what it covers.
const LAYER_WORDS = {
  default: 'Totem’s built-in rule', global: 'your rule for all projects', project: 'your rule for this project',
};
const RULE_REASON = /\bby the (default|global|project) rule (\S+): (.*)$/s;

export function plainReason(reason) {
  const text = String(reason ?? '');
  const match = RULE_REASON.exec(text);
  if (!match) return text;
  const [, layer, tool, pattern] = match;
  const covers = pattern === '*' ? `every ${tool} call` : `${tool} ${pattern}`;
  return `${text.slice(0, match.index)}by ${LAYER_WORDS[layer]} for ${covers}`;
}

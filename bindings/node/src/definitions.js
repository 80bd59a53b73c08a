// The tool definitions in the shapes agent ecosystems expect, built from the component's own
// definitions, exactly as `dsh-host tools --format FORMAT` prints them: MCP's carry title and
// annotations; OpenAI's and Anthropic's function tools have no place for either.

export const FORMATS = Object.freeze(["mcp", "openai", "anthropic"]);

const SHAPES = {
  mcp: (t) => ({
    name: t.name,
    title: t.title,
    description: t.description,
    inputSchema: t.inputSchema,
    annotations: { title: t.title, ...t.annotations },
  }),
  openai: (t) => ({
    type: "function",
    function: { name: t.name, description: t.description, parameters: t.inputSchema },
  }),
  anthropic: (t) => ({ name: t.name, description: t.description, input_schema: t.inputSchema }),
};

/** `tools` (the component's definitions, schema parsed) in `format`. */
export function definitionsIn(tools, format) {
  const shape = Object.hasOwn(SHAPES, format) ? SHAPES[format] : undefined;
  if (!shape) throw new RangeError(`unknown definitions format ${JSON.stringify(format)}; expected one of: ${FORMATS.join(", ")}`);
  // A deep copy each time: a caller editing the result does not change later results.
  return structuredClone(tools.map(shape));
}

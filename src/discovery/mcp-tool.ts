// A paid MCP tool as the x402 bazaar describes one (`info.input.type: "mcp"`): in the bazaar extension of the
// tool's 402, in /discovery/resources and in /.well-known/x402.json. The tool's name, description and input
// schema are the server's own (src/mcp/tool-catalog.ts).

/** What a catalog needs to call one tool. */
export interface McpToolListing {
  name: string
  description?: string
  inputSchema: Record<string, unknown>
}

/** tollgate forwards MCP over Streamable HTTP (JSON or SSE answers); the bazaar's name for it. */
const TRANSPORT = 'streamable-http'

/**
 * The `bazaar` extension ({info, schema}) shaped as the published `declareDiscoveryExtension` shapes an MCP
 * tool (@x402/extensions 2.27: `toolName`), with `tool` beside it: the bazaar specification's text names the
 * field `tool`, the published code `toolName`; a catalog built on either finds the tool's name. As in the
 * published code, `schema` requires an object input schema without restating the server's (a catalog must
 * not have to read a foreign schema to validate `info`).
 */
export function mcpBazaarExtension(t: McpToolListing): Record<string, unknown> {
  const input: Record<string, unknown> = {
    type: 'mcp',
    toolName: t.name,
    tool: t.name,
    transport: TRANSPORT,
    inputSchema: t.inputSchema,
  }
  if (t.description !== undefined) input.description = t.description
  return {
    info: { input },
    schema: {
      $schema: 'https://json-schema.org/draft/2020-12/schema',
      type: 'object',
      properties: {
        input: {
          type: 'object',
          properties: {
            type: { type: 'string', const: 'mcp' },
            toolName: { type: 'string' },
            tool: { type: 'string' },
            description: { type: 'string' },
            transport: { type: 'string', enum: [TRANSPORT] },
            inputSchema: { type: 'object' },
          },
          required: ['type', 'toolName', 'tool', 'inputSchema'],
          additionalProperties: false,
        },
      },
      required: ['input'],
    },
  }
}

/** The tool's invocation contract lifted out of the bazaar envelope, as /.well-known/x402.json carries it. */
export function mcpManifestInput(t: McpToolListing): Record<string, unknown> {
  return { type: 'mcp', toolName: t.name, tool: t.name, transport: TRANSPORT, inputSchema: t.inputSchema }
}

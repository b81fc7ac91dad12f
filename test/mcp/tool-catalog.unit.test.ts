// The tools a server lists, as kept for discovery (bounded, the server's words only), how a page of a paged
// list updates them, and the MCP bazaar extension built from one, as the published @x402/extensions reads it.
import {
  type DiscoveryExtension,
  validateDiscoveryExtension,
  validateDiscoveryExtensionSpec,
} from '@x402/extensions/bazaar'
import { describe, expect, it } from 'vitest'
import { mcpBazaarExtension } from '../../src/discovery/mcp-tool.ts'
import { nextCatalog, OPEN_SCHEMA, readCatalog, sameCatalog } from '../../src/mcp/tool-catalog.ts'

const schema = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] }

describe('readCatalog', () => {
  it('keeps name, description and input schema of each well-formed tool, nothing else', () => {
    const tools = readCatalog({
      tools: [
        { name: 'weather', description: 'Weather', inputSchema: schema, _meta: { x: 1 }, annotations: {} },
        { name: 'bare' },
        { name: 'bad name', inputSchema: schema },
        { name: 'weather', description: 'a second weather is ignored' },
        'not a tool',
        { description: 'no name' },
      ],
    })
    expect(tools).toEqual([
      { name: 'weather', description: 'Weather', input_schema: schema },
      { name: 'bare', input_schema: OPEN_SCHEMA },
    ])
    expect(readCatalog({ tools: 'nope' })).toEqual([])
  })

  it('bounds what it keeps: long descriptions cut, large or foreign schemas opened, at most 200 tools', () => {
    const [long] = readCatalog({
      tools: [{ name: 'long', description: 'd'.repeat(5_000), inputSchema: schema }],
    })
    expect(long!.description).toHaveLength(2_048)
    const big = { type: 'object', properties: { x: { type: 'string', description: 'x'.repeat(20_000) } } }
    const foreign = { type: 'object', properties: { x: { $ref: 'https://evil.example/s.json' } } }
    const local = {
      type: 'object',
      $defs: { a: { type: 'string' } },
      properties: { x: { $ref: '#/$defs/a' } },
    }
    expect(
      readCatalog({
        tools: [
          { name: 'big', inputSchema: big },
          { name: 'foreign', inputSchema: foreign },
          { name: 'local', inputSchema: local },
          { name: 'array', inputSchema: [] },
        ],
      }).map((t) => t.input_schema),
    ).toEqual([OPEN_SCHEMA, OPEN_SCHEMA, local, OPEN_SCHEMA])
    const many = readCatalog({ tools: Array.from({ length: 300 }, (_, i) => ({ name: `t${i}` })) })
    expect(many).toHaveLength(200)
  })
})

describe('nextCatalog and sameCatalog', () => {
  const a = { name: 'a', input_schema: OPEN_SCHEMA }
  const b = { name: 'b', description: 'B', input_schema: schema }
  it('a complete list replaces; a page updates the tools it names and keeps the others', () => {
    expect(nextCatalog([a, b], [a], true)).toEqual([a])
    const b2 = { ...b, description: 'B2' }
    expect(nextCatalog([a, b], [b2], false)).toEqual([a, b2])
    expect(nextCatalog(null, [b], false)).toEqual([b])
  })

  it('compares what the tools say, not the order of their keys (jsonb reorders them)', () => {
    const reordered = {
      input_schema: { required: ['city'], properties: { city: { type: 'string' } }, type: 'object' },
      description: 'B',
      name: 'b',
    }
    expect(sameCatalog([a, b], [a, reordered])).toBe(true)
    expect(sameCatalog([a, b], [a, { ...b, description: 'other' }])).toBe(false)
    expect(sameCatalog([a, b], [b, a])).toBe(false)
    expect(sameCatalog(null, [])).toBe(false)
  })
})

describe('mcpBazaarExtension', () => {
  it('is valid for the published bazaar code, with and without a description', () => {
    for (const t of [
      { name: 'weather', description: 'The weather', inputSchema: schema },
      { name: 'bare', inputSchema: OPEN_SCHEMA },
    ]) {
      const ext = mcpBazaarExtension(t) as unknown as DiscoveryExtension
      expect(validateDiscoveryExtension(ext)).toEqual({ valid: true })
      expect(validateDiscoveryExtensionSpec(ext as never)).toEqual({ valid: true })
      expect(ext.info.input).toMatchObject({ type: 'mcp', toolName: t.name, tool: t.name })
    }
  })
})

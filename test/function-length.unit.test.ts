// House rule: no function in src/ longer than 100 lines unless a comment at its top says why it must be one
// piece. Measured with the TypeScript compiler on every function, method, arrow and accessor body.
import { readdirSync, readFileSync } from 'node:fs'
import { join, relative } from 'node:path'
import ts from 'typescript'
import { describe, expect, it } from 'vitest'

const MAX_LINES = 100
const root = join(import.meta.dirname, '..')
// The why-comment that allows a longer function: in a comment just above it (or its statement), or as the
// first thing inside its body, e.g. `// One piece: …`.
const ONE_PIECE = /one piece/i

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name)
    if (e.isDirectory()) return sourceFiles(path)
    return e.name.endsWith('.ts') && !e.name.endsWith('.d.ts') ? [path] : []
  })
}

/** Comments right above the node, or above the statement that declares it (`const f = () => …`). */
function leadingComments(text: string, node: ts.Node): string {
  let holder: ts.Node = node
  while (
    holder.parent &&
    (ts.isVariableDeclaration(holder.parent) ||
      ts.isVariableDeclarationList(holder.parent) ||
      ts.isVariableStatement(holder.parent) ||
      ts.isPropertyAssignment(holder.parent) ||
      ts.isPropertyDeclaration(holder.parent) ||
      ts.isExportAssignment(holder.parent))
  )
    holder = holder.parent
  const ranges = ts.getLeadingCommentRanges(text, holder.getFullStart()) ?? []
  return ranges.map((r) => text.slice(r.pos, r.end)).join('\n')
}

function firstBodyComment(text: string, body: ts.Node): string {
  const open = body.getStart() + 1
  const ranges = ts.getLeadingCommentRanges(text, open) ?? []
  return ranges.map((r) => text.slice(r.pos, r.end)).join('\n')
}

function longFunctions(files: string[]): string[] {
  const found: string[] = []
  for (const file of files) {
    const text = readFileSync(file, 'utf8')
    const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true)
    const visit = (node: ts.Node) => {
      if (ts.isFunctionLike(node) && 'body' in node && node.body && ts.isBlock(node.body)) {
        const start = source.getLineAndCharacterOfPosition(node.body.getStart()).line
        const end = source.getLineAndCharacterOfPosition(node.body.getEnd()).line
        const lines = end - start + 1
        if (
          lines > MAX_LINES &&
          !ONE_PIECE.test(leadingComments(text, node)) &&
          !ONE_PIECE.test(firstBodyComment(text, node.body))
        ) {
          const name = (node as ts.FunctionDeclaration).name?.getText(source) ?? '(anonymous)'
          found.push(`${relative(root, file)}:${start + 1} ${name}: ${lines} lines`)
        }
      }
      ts.forEachChild(node, visit)
    }
    visit(source)
  }
  return found
}

describe('function length', () => {
  it('no function in src/ is over 100 lines without a comment saying why it is one piece', () => {
    expect(longFunctions(sourceFiles(join(root, 'src')))).toEqual([])
  })
})

// The chain of stages around an answer: stages run in rank order whatever order they were added in, a stage's
// held-back tail passes through the stages after it, and the chain tells the proxy when the answer is resized
// or held.
import { describe, expect, it } from 'vitest'
import { type AnswerStage, AnswerStages, RANK } from '../../../src/data-plane/stages/answer-stages.ts'

/** Appends its mark to every chunk, holds back `tail` until the end, and logs what it saw. */
function marker(mark: string, log: string[], tail: string | null = null): AnswerStage {
  return {
    onHead: (_head, status) => log.push(`${mark} head ${status}`),
    onData: (chunk) => {
      log.push(`${mark} ${chunk}`)
      return Buffer.from(`${chunk}${mark}`)
    },
    onEnd: () => (tail === null ? null : Buffer.from(tail)),
    onDone: (outcome, captured, released) => log.push(`${mark} done ${outcome.kind} ${captured} ${released}`),
  }
}

describe('AnswerStages', () => {
  it('runs its stages in rank order, whatever order they came in', () => {
    const log: string[] = []
    const stages = new AnswerStages()
    stages.add(RANK.recorder, marker('R', log))
    stages.add(RANK.meter, marker('M', log))
    stages.onHead([], 200)
    expect(stages.onData(Buffer.from('x')).toString()).toBe('xMR')
    stages.onDone({ kind: 'responded', status: 200, bytes: 1 }, true, false)
    expect(log).toEqual([
      'M head 200',
      'R head 200',
      'M x',
      'R xM',
      'M done responded true false',
      'R done responded true false',
    ])
  })

  it("passes a stage's held-back tail through the stages after it", () => {
    const log: string[] = []
    const stages = new AnswerStages()
    stages.add(RANK.meter, marker('M', log, 'm'))
    stages.add(RANK.digest, marker('D', log))
    expect(stages.onEnd()?.toString()).toBe('mD')
    expect(log).toEqual(['D m'])
  })

  it('a stage that reads no bytes leaves the chunks as they are', () => {
    const stages = new AnswerStages()
    stages.add(RANK.observed, { onDone: () => {} })
    const chunk = Buffer.from('same')
    expect(stages.onData(chunk)).toBe(chunk)
    expect(stages.onEnd()).toBe(null)
  })

  it('a rewriter resizes the answer, a held answer holds it', () => {
    const stages = new AnswerStages()
    expect([stages.resizes, stages.holds]).toEqual([false, false])
    stages.add(RANK.rewriter, { onData: (c) => c })
    stages.add(RANK.held, { onData: (c) => c })
    expect([stages.resizes, stages.holds, stages.has(RANK.digest), stages.has(RANK.held)]).toEqual([
      true,
      true,
      false,
      true,
    ])
  })
})

// Keyset pages over a list route.
import { act } from './api.js'
import { $ } from './dom.js'

/** A stack of starting_after cursors, newest first; `load(cursor)` shows a page and returns the list. */
export function pager(prefix, load) {
  let cursors = [null]
  let index = 0
  const prev = $(`${prefix}-prev`)
  const next = $(`${prefix}-next`)
  async function show() {
    const list = await load(cursors[index])
    prev.disabled = index === 0
    next.disabled = !list.has_more
    if (list.has_more && list.data.length > 0) cursors[index + 1] = list.data[list.data.length - 1].id
  }
  prev.addEventListener('click', () => {
    if (index > 0) index--
    act(prev, show)
  })
  next.addEventListener('click', () => {
    index++
    act(next, show)
  })
  return {
    atFirst: () => index === 0,
    first() {
      cursors = [null]
      index = 0
      return show()
    },
    reload: show,
  }
}

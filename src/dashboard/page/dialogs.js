// The dialogs every page shares: Cancel buttons, and the one that shows a secret once.
import { $, copy } from './dom.js'

// Cancel is a plain button (not the form's first submit button), so Enter in a field submits the action.
for (const b of document.querySelectorAll('.dialog-cancel'))
  b.addEventListener('click', () => b.closest('dialog').close('cancel'))

export function showSecret(title, text, secret) {
  $('secret-title').textContent = title
  $('secret-text').textContent = text
  $('secret-value').value = secret
  $('secret-dialog').showModal()
  $('secret-value').select()
}
$('secret-copy').addEventListener('click', () => copy($('secret-value').value, 'Secret'))
$('secret-dialog').addEventListener('close', () => {
  $('secret-value').value = ''
})

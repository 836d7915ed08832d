/** Where the keyboard focus goes when the control that had it is gone (a deleted row's buttons). */

/** Moves the focus to the page's heading, so that the next Tab continues from the top of the page. */
export function focusPageHeading(): void {
  if (typeof document === 'undefined') return
  const heading = document.querySelector<HTMLElement>('#main h1')
  if (!heading) return
  heading.tabIndex = -1
  heading.focus()
}

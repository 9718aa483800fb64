(s "q\"b\\n\n\t\r\u{1F600}\u{0}" "raw
newline" "λ😀")
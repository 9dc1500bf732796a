#!/bin/bash
case " $STRANKS " in
  *" $PMI_RANK "*) exec strace -f -ttt -o $STOUT/st.r$PMI_RANK "$@" ;;
esac
exec "$@"

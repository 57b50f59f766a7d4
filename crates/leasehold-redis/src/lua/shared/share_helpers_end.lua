  end
end
